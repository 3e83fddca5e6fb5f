"""Correction for sampling with a different engine than the trainer (vLLM): pure tensor functions.

A generation engine samples y ~ mu (its own kernels, precision, batching), while the loss
assumes y ~ pi_old (the trainer's model at rollout time). Even with identical weights the two
differ a little; truncated importance sampling re-weights each token of the policy-gradient
loss by the ratio, capped so that a rare token the engine over-sampled cannot dominate
(Yao et al., "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training", 2025;
TRL's ``vllm_importance_sampling_mode="token_truncate"``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def token_truncated_weights(old_logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor,
                            cap: float = 2.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token-level truncated importance weights:

        w_t = min( pi_old(y_t) / mu(y_t), C ) = min( exp(log pi_old(y_t) - log mu(y_t)), C )

    Shapes (B, T). Returns detached weights (1 where ``mask`` is 0 or a sampler log-prob is NaN,
    i.e. no correction) and statistics of the raw ratio over masked tokens: mean, max, min and
    the fraction of tokens truncated at C.
    """
    if cap <= 0:
        raise ValueError(f"token_truncated_weights: cap must be > 0, got {cap}")
    with torch.no_grad():
        m = mask.bool()
        diff = torch.nan_to_num((old_logps.detach().float() - sampler_logps.float()), nan=0.0)
        ratio = torch.where(m, diff.exp(), torch.ones_like(diff))
        weights = ratio.clamp(max=cap)
        vals = ratio[m]
        if vals.numel() == 0:
            vals = torch.ones(1)
        stats = {"importance_sampling/ratio_mean": vals.mean(), "importance_sampling/ratio_max": vals.max(),
                 "importance_sampling/ratio_min": vals.min(),
                 "importance_sampling/truncated_fraction": (vals > cap).float().mean()}
    return weights, stats


SAMPLING_CORRECTIONS: dict[str, Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]] = {
    "token_truncate": token_truncated_weights,
}


def sampling_correction(name: str) -> Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]:
    if name not in SAMPLING_CORRECTIONS:
        raise ValueError(f"sampling correction must be one of {sorted(SAMPLING_CORRECTIONS)}, got {name!r}")
    return SAMPLING_CORRECTIONS[name]
