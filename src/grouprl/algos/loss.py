"""The policy objective around any registered loss: importance weights, the KL term and the aggregation
(``loss_type``) that makes per-token terms one number. Pure tensor functions.

    loss = aggregate_{loss_type}( w_t * l_t + beta * KL_t )

The surrogates l_t themselves are registered in ``algos/policy_losses.py`` (ppo_clip, gspo, cispo, ...),
the entropy bonus is ``algos/entropy.py``, the sampling correction's weights w_t ``algos/importance.py``.
The aggregation is a separate named choice from the loss: any loss with any aggregation. Under gradient
accumulation and several processes each micro-batch's loss is weighted by :func:`micro_batch_weight` so
that the accumulated gradient is the whole batch's.
"""

from __future__ import annotations

from typing import Any

import torch

from grouprl.algos.policy_losses import LOSSES, Loss

AGGREGATIONS = ("grpo", "bnpo", "dapo", "dr_grpo")
KL_ESTIMATORS = ("k1", "k2", "k3")


def aggregate_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str,
    max_completion_length: int | None = None,
    num_items_in_batch: float | None = None,
) -> torch.Tensor:
    """One micro-batch's loss from its per-token terms l_t ((B, T), or (B, 1) broadcast over the
    sequence's tokens) and mask (B, T):

    - "grpo":    mean over each sequence's tokens, then over sequences (Shao et al., 2024);
    - "bnpo":    sum over this micro-batch's tokens / its token count (TRL's ``bnpo``);
    - "dapo":    sum over all tokens / ``num_items_in_batch`` (the tokens of the whole
                 generation batch, so gradient accumulation gives the same result; defaults
                 to this micro-batch's tokens) (Yu et al., 2025);
    - "dr_grpo": sum over all tokens / (sequences x ``max_completion_length``) (Liu et al., 2025).
    """
    mask = mask.to(per_token.dtype)
    if loss_type == "grpo":
        return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dapo":
        denom = mask.sum() if num_items_in_batch is None else torch.as_tensor(num_items_in_batch)
        return (per_token * mask).sum() / denom.clamp(min=1.0)
    if loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("policy_loss: loss_type 'dr_grpo' needs max_completion_length")
        return (per_token * mask).sum() / (mask.size(0) * max_completion_length)
    raise ValueError(f"policy_loss: loss_type must be one of {', '.join(AGGREGATIONS)}, got {loss_type!r}")


def micro_batch_weight(loss_type: str, micro_batch_size: float, batch_size: float, micro_batches: float = 1) -> float:
    """The factor on a micro-batch's loss so that the accumulated gradient is the whole batch's.

    "grpo" and "dr_grpo" average over the micro-batch's sequences, so each micro-batch counts by
    its share of the batch (B_m / B); "dapo" already divides by the whole batch's tokens (1);
    "bnpo" is a per-micro-batch token mean, averaged over the batch's ``micro_batches`` (all
    processes' together), as TRL's gradient accumulation does.
    """
    if loss_type == "dapo":
        return 1.0
    if loss_type == "bnpo":
        return 1.0 / micro_batches
    return micro_batch_size / batch_size


def kl_penalty(logps: torch.Tensor, ref_logps: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) on tokens sampled from pi (Schulman, 2020,
    "Approximating KL Divergence"), with log r = log pi_ref(y_t) - log pi(y_t):

        k1 = -log r                (unbiased, high variance, can be negative)
        k2 = (log r)^2 / 2         (biased, low variance; its gradient is the true KL's)
        k3 = (r - 1) - log r       (unbiased, low variance, >= 0; GRPO's choice, Shao et al., 2024)
    """
    log_r = ref_logps - logps
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r**2
    if estimator == "k3":
        return torch.exp(log_r) - log_r - 1
    raise ValueError(f"kl_estimator must be one of {', '.join(KL_ESTIMATORS)}, got {estimator!r}")


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
    extra_terms: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One micro-batch's loss around any registered ``loss``:

        l_t <- w_t * l_t + beta * KL_t (+ e_t)        then aggregated by ``loss_type`` (:func:`aggregate_loss`)

    ``extra_terms`` e ((B, T), with gradient): per-token terms of another objective mixed in, aggregated
    with the loss (on-policy distillation's ``coef * d_t``, ``algos/distill_objectives.py``).

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
    if extra_terms is not None:
        per_token = per_token + extra_terms
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
