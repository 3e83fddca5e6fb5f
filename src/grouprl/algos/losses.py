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
    """H = -sum_v p_v log p_v per position, with its gradient (the entropy bonus, ``algos/entropy.py``)."""
    out = []
    for lg in logits.split(chunk):
        logp = torch.log_softmax(lg.float(), dim=-1)
        out.append(-(logp.exp() * logp).sum(-1))
    return torch.cat(out)


def scored_entropy(logits: torch.Tensor, with_entropy: bool | str) -> torch.Tensor:
    """The scorers' entropy: ``with_entropy="grad"`` keeps its gradient (the entropy bonus), else a detached metric."""
    return token_entropy(logits) if with_entropy == "grad" else entropy_from_logits(logits.detach())


def policy_objective(loss: Loss, logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor,
                     mask: torch.Tensor, options: dict[str, Any] | None = None, loss_type: str = "grpo",
                     beta: float = 0.0, ref_logps: torch.Tensor | None = None, kl_estimator: str = "k3",
                     max_completion_length: int | None = None, num_items_in_batch: float | None = None,
                     token_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
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
    return policy_objective(LOSSES["ppo_clip"], logps, old_logps, advantages, mask,
                            {"epsilon_low": epsilon_low, "epsilon_high": epsilon_high}, loss_type, beta, ref_logps,
                            "k3", max_completion_length, num_items_in_batch, token_weights)


LOSS_TYPES = AGGREGATIONS
