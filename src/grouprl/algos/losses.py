"""Token log-probs, entropies and the policy objective around any registered loss. Pure tensor functions.

The losses themselves live in ``algos/policy_losses.py`` (a registry), the aggregations and KL
estimators in ``algos/aggregation.py``, the entropy bonus in ``algos/entropy.py``.
"""

from __future__ import annotations

from typing import Any

import torch

from grouprl.algos.aggregation import AGGREGATIONS, aggregate_loss, kl_penalty, micro_batch_weight  # noqa: F401
from grouprl.algos.policy_losses import LOSSES, Loss


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


def policy_objective(
    loss: Loss,
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    options: dict[str, Any] | None = None,
    loss_type: str = "grpo",
    *,
    beta: float = 0.0,
    ref_logps: torch.Tensor | None = None,
    kl_estimator: str = "k3",
    max_completion_length: int | None = None,
    num_items_in_batch: float | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One micro-batch's loss around any registered ``loss``:

        l_t <- w_t * l_t + beta * KL_t        then aggregated by ``loss_type`` (``algos/aggregation.py``)

    ``token_weights`` w ((B, T) or (B, 1), detached): the sampling correction of ``algos/importance.py``
    when the sampler is not the trainer (on the policy term, not the KL, as TRL). KL_t by
    ``kl_estimator`` (k1, k2, k3) against ``ref_logps``. Returns the loss and detached statistics.
    """
    per_token, stats = loss(logps, old_logps, advantages, mask, **(options or {}))
    if token_weights is not None:
        per_token = per_token * token_weights.detach()
    kl = None
    if beta != 0.0:
        if ref_logps is None:
            raise ValueError("policy_loss: beta > 0 needs ref_logps")
        kl = kl_penalty(logps, ref_logps, kl_estimator)
        per_token = per_token + beta * kl
    value = aggregate_loss(per_token, mask, loss_type, max_completion_length, num_items_in_batch)
    if kl is not None:
        with torch.no_grad():
            m = mask.to(kl.dtype)
            stats["kl"] = (kl * m).sum() / m.sum().clamp(min=1.0)
    return value, stats


def policy_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str = "grpo",
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    beta: float = 0.0,
    ref_logps: torch.Tensor | None = None,
    max_completion_length: int | None = None,
    num_items_in_batch: float | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GRPO's loss: :func:`policy_objective` with the ``ppo_clip`` loss and the k3 KL,

        l_t = -min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A) + beta * KL_t

    Shapes: logps/old_logps/ref_logps/mask (B, T); advantages (B,).
    """
    return policy_objective(
        LOSSES["ppo_clip"],
        logps,
        old_logps,
        advantages,
        mask,
        {"epsilon_low": epsilon_low, "epsilon_high": epsilon_high},
        loss_type,
        beta=beta,
        ref_logps=ref_logps,
        kl_estimator="k3",
        max_completion_length=max_completion_length,
        num_items_in_batch=num_items_in_batch,
        token_weights=token_weights,
    )
