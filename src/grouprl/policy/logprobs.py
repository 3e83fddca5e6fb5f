"""Token log-probs and entropies from logits: what the scorers (``policy/scoring.py``, ``policy/lm_head.py``,
``policy/grouped_scoring.py``) compute for the loss. Pure tensor functions.
"""

from __future__ import annotations

import torch


def selective_log_softmax(logits: torch.Tensor, token_ids: torch.Tensor, chunk: int = 64) -> torch.Tensor:
    """log softmax(logits)[token] without materialising the full float32 log-prob tensor.

        log p(y_t) = z_{y_t} - logsumexp_v z_v

    Processed ``chunk`` rows at a time; float32 only for the logsumexp of one chunk.
    """
    out = []
    for lg, ids in zip(logits.split(chunk), token_ids.split(chunk)):
        picked = lg.gather(-1, ids.unsqueeze(-1)).squeeze(-1).float()
        out.append(picked - torch.logsumexp(lg.float(), dim=-1))
    return torch.cat(out)


@torch.no_grad()
def entropy_from_logits(logits: torch.Tensor, chunk: int = 64) -> torch.Tensor:
    """H = -sum_v p_v log p_v per position (a metric; no gradient)."""
    return token_entropy(logits, chunk)


def token_entropy(logits: torch.Tensor, chunk: int = 64) -> torch.Tensor:
    """H = -sum_v p_v log p_v per position, with its gradient (the entropy bonus, ``algos/entropy.py``).
    Tokens outside a truncated support (logit -inf, see :func:`truncate_logits`) count 0 (0 log 0 = 0)."""
    out = []
    for lg in logits.split(chunk):
        logp = torch.log_softmax(lg.float(), dim=-1)
        finite = torch.where(torch.isinf(logp), torch.zeros_like(logp), logp)  # no NaN from 0 * -inf
        out.append(-(logp.exp() * finite).sum(-1))
    return torch.cat(out)


@torch.no_grad()
def _outside_support(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """True where a token is cut by top-k then top-p, as vLLM's sampler cuts (ties at the k-th value kept;
    a token is cut when the probability of it and every less likely token is at most 1 - p; the most
    likely token never is)."""
    ascending, order = logits.float().sort(dim=-1)
    cut = torch.zeros_like(ascending, dtype=torch.bool)
    if 0 < top_k < logits.size(-1):
        kth = ascending[:, -top_k].unsqueeze(-1)
        cut = ascending < kth
    if top_p < 1.0:
        probs = torch.softmax(ascending.masked_fill(cut, float("-inf")), dim=-1)
        low_tail = probs.cumsum(dim=-1) <= 1 - top_p
        low_tail[:, -1] = False
        cut = cut | low_tail
    return torch.zeros_like(cut).scatter(-1, order, cut)


def truncate_logits(
    logits: torch.Tensor, targets: torch.Tensor, top_k: int = 0, top_p: float = 1.0, chunk: int = 64
) -> torch.Tensor:
    """Logits (N, V) with every token the sampler's top-k / top-p would not have kept set to -inf, so that a
    log-softmax renormalises over the kept support, as the engine's processed log-probs are:

        log pi_S(y_t) = z_{y_t} - logsumexp_{v in S_t} z_v,   S_t = the kept tokens at position t

    (the support replay of DeepSeek-V3.2's "keep sampling mask"; TRL #7269). The sampled token
    ``targets`` (N,) always stays in: the engine kept it, and a float rounding at the boundary must
    not make its log-prob -inf. The mask carries no gradient; the kept logits keep theirs.
    """
    if top_k <= 0 and top_p >= 1.0:
        return logits
    out = []
    for lg, ids in zip(logits.split(chunk), targets.split(chunk)):
        cut = _outside_support(lg.detach(), top_k, top_p)
        cut = cut.scatter(-1, ids.unsqueeze(-1), False)
        out.append(lg.masked_fill(cut, float("-inf")))
    return torch.cat(out)


def scored_entropy(logits: torch.Tensor, with_entropy: bool | str) -> torch.Tensor:
    """The scorers' entropy: ``with_entropy="grad"`` keeps its gradient (the entropy bonus), else a detached metric."""
    return token_entropy(logits) if with_entropy == "grad" else entropy_from_logits(logits.detach())
