"""How per-token loss terms become one number (``loss_type``), and the KL estimators. Pure tensor functions.

The aggregation is a separate named choice from the loss (``algos/policy_losses.py``): any loss
with any aggregation. Under gradient accumulation and several processes each micro-batch's loss
is weighted by :func:`micro_batch_weight` so that the accumulated gradient is the whole batch's.
"""

from __future__ import annotations

import torch

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
