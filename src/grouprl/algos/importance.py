"""Correction for sampling with a different engine than the trainer (vLLM): pure tensor functions.

A generation engine samples y ~ mu (its own kernels, precision, batching), while the loss
assumes y ~ pi_old (the trainer's model at rollout time). Even with identical weights the two
differ a little; truncated importance sampling re-weights each token of the policy-gradient
loss by the ratio, capped so that a rare token the engine over-sampled cannot dominate
(Yao et al., "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training", 2025;
TRL's ``vllm_importance_sampling_mode``). Four modes, as TRL's:

- ``token_truncate`` (TIS):    w_t = min(rho_t, C),            rho_t = pi_old(y_t) / mu(y_t)
- ``token_mask`` (MIS):        w_t = rho_t if rho_t <= C else 0
- ``sequence_truncate``:       w_i = min(rho_i, C),            rho_i = prod_t rho_t = exp(sum_t log rho_t)
- ``sequence_mask``:           w_i = rho_i if rho_i <= C else 0   (the whole sequence dropped)

Sequence-level weights (shape (B, 1)) are unbiased for a sequence-level objective (GSPO) and
catch a sequence whose small per-token mismatches add up (Liu et al., 2025, "When Speed Kills
Stability: Demystifying RL Collapse from the Training-Inference Mismatch").
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from grouprl.registry import Registry


def importance_weights(
    old_logps: torch.Tensor,
    sampler_logps: torch.Tensor,
    mask: torch.Tensor,
    cap: float = 2.0,
    level: str = "token",
    mode: str = "truncate",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Detached weights ((B, T) at ``level="token"``, (B, 1) at ``"sequence"``) and statistics of the raw
    ratio over masked tokens (sequences): mean, max, min and the fraction above C (truncated or masked).
    A masked-out token or a NaN sampler log-prob counts as log rho = 0 (no correction)."""
    if cap <= 0:
        raise ValueError(f"importance weights: cap must be > 0, got {cap}")
    with torch.no_grad():
        m = mask.bool()
        diff = torch.nan_to_num((old_logps.detach().float() - sampler_logps.float()), nan=0.0)
        diff = torch.where(m, diff, torch.zeros_like(diff))
        if level == "sequence":
            diff, m = diff.sum(-1, keepdim=True), m.any(-1, keepdim=True)
        ratio = diff.exp()
        weights = ratio.clamp(max=cap) if mode == "truncate" else torch.where(ratio > cap, 0.0, ratio)
        vals = ratio[m]
        if vals.numel() == 0:
            vals = torch.ones(1)
        prefix = "importance_sampling/" if level == "token" else "importance_sampling/sequence_"
        stats = {
            f"{prefix}ratio_mean": vals.mean(),
            f"{prefix}ratio_max": vals.max(),
            f"{prefix}ratio_min": vals.min(),
            f"{prefix}{'truncated' if mode == 'truncate' else 'masked'}_fraction": (vals > cap).float().mean(),
        }
    return weights, stats


def token_truncated_weights(
    old_logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor, cap: float = 2.0
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token-level truncated importance weights w_t = min(exp(log pi_old(y_t) - log mu(y_t)), C), (B, T)."""
    return importance_weights(old_logps, sampler_logps, mask, cap, "token", "truncate")


def token_masked_weights(old_logps, sampler_logps, mask, cap: float = 2.0):
    """Token-level masked importance weights: rho_t, or 0 where rho_t > C."""
    return importance_weights(old_logps, sampler_logps, mask, cap, "token", "mask")


def sequence_truncated_weights(old_logps, sampler_logps, mask, cap: float = 2.0):
    """Sequence-level truncated importance weights min(prod_t rho_t, C), (B, 1)."""
    return importance_weights(old_logps, sampler_logps, mask, cap, "sequence", "truncate")


def sequence_masked_weights(old_logps, sampler_logps, mask, cap: float = 2.0):
    """Sequence-level masked importance weights: prod_t rho_t, or 0 for the whole sequence where it exceeds C."""
    return importance_weights(old_logps, sampler_logps, mask, cap, "sequence", "mask")


# Built-ins only: the config's ``sampling_correction`` is one of these four or ``none`` (a Literal there).
SAMPLING_CORRECTIONS: Registry[Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]] = Registry(
    "sampling correction", takes_code=False
)
SAMPLING_CORRECTIONS.update(
    token_truncate=token_truncated_weights,
    token_mask=token_masked_weights,
    sequence_truncate=sequence_truncated_weights,
    sequence_mask=sequence_masked_weights,
)
sampling_correction = SAMPLING_CORRECTIONS.resolve  # the weights function of a name; UnknownName lists the four
