"""Token log-probs and the clipped policy-gradient loss. Pure tensor functions."""

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
    out = []
    for lg in logits.split(chunk):
        logp = torch.log_softmax(lg.float(), dim=-1)
        out.append(-(logp.exp() * logp).sum(-1))
    return torch.cat(out)


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
    """PPO clipped surrogate (Schulman et al., 2017) per token, as in GRPO (Shao et al., 2024):

        rho_t = exp(log pi(y_t) - log pi_old(y_t))
        l_t   = -min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A) + beta * KL_t
        KL_t  = exp(q - p) - (q - p) - 1,  q = log pi_ref, p = log pi   (k3, Schulman 2020)

    with eps_high > eps_low the DAPO "clip-higher" (Yu et al., 2025). The per-token terms are
    aggregated by :func:`aggregate_loss` (``loss_type``).

    ``token_weights`` (detached, (B, T)) multiply the clipped term (not the KL) before aggregation:
    the truncated importance weights of ``algos.importance`` when the sampler is not the trainer
    (as TRL does).

    Shapes: logps/old_logps/ref_logps/mask (B, T); advantages (B,). Returns the loss for
    this micro-batch and detached statistics.
    """
    mask = mask.to(logps.dtype)
    log_ratio = logps - old_logps
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    adv = advantages.unsqueeze(-1)
    per_token = -torch.min(ratio * adv, clipped * adv)
    if token_weights is not None:
        per_token = per_token * token_weights.detach()
    kl = None
    if beta != 0.0:
        if ref_logps is None:
            raise ValueError("policy_loss: beta > 0 needs ref_logps")
        delta = ref_logps - logps
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + beta * kl

    loss = aggregate_loss(per_token, mask, loss_type, max_completion_length, num_items_in_batch)

    with torch.no_grad():
        n = mask.sum().clamp(min=1.0)
        low = (ratio < 1 - epsilon_low) & (adv < 0)
        high = (ratio > 1 + epsilon_high) & (adv > 0)
        stats = {
            "clip_ratio/low_mean": (low.float() * mask).sum() / n,
            "clip_ratio/high_mean": (high.float() * mask).sum() / n,
            "clip_ratio/region_mean": ((low | high).float() * mask).sum() / n,
        }
        if kl is not None:
            stats["kl"] = (kl * mask).sum() / n
    return loss, stats


LOSS_TYPES = ("grpo", "dapo", "dr_grpo")


def aggregate_loss(per_token: torch.Tensor, mask: torch.Tensor, loss_type: str,
                   max_completion_length: int | None = None,
                   num_items_in_batch: float | None = None) -> torch.Tensor:
    """One micro-batch's loss from its per-token terms l_t (B, T) and mask (B, T):

    - "grpo":    mean over each sequence's tokens, then over sequences (Shao et al., 2024);
    - "dapo":    sum over all tokens / ``num_items_in_batch`` (the tokens of the whole
                 generation batch, so gradient accumulation gives the same result; defaults
                 to this micro-batch's tokens) (Yu et al., 2025);
    - "dr_grpo": sum over all tokens / (sequences x ``max_completion_length``) (Liu et al., 2025).
    """
    if loss_type == "grpo":
        return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "dapo":
        denom = mask.sum() if num_items_in_batch is None else torch.as_tensor(num_items_in_batch)
        return (per_token * mask).sum() / denom.clamp(min=1.0)
    if loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("policy_loss: loss_type 'dr_grpo' needs max_completion_length")
        return (per_token * mask).sum() / (per_token.size(0) * max_completion_length)
    raise ValueError(f"policy_loss: loss_type must be 'grpo', 'dapo' or 'dr_grpo', got {loss_type!r}")


def micro_batch_weight(loss_type: str, micro_batch_size: int, batch_size: int) -> float:
    """The factor on a micro-batch's loss so that the accumulated gradient is the whole batch's.

    "grpo" and "dr_grpo" average over the micro-batch's sequences, so each micro-batch counts by
    its share of the batch (B_m / B); "dapo" already divides by the whole batch's tokens (1).
    """
    return 1.0 if loss_type == "dapo" else micro_batch_size / batch_size
