"""Advantage estimators: pure functions from episode scores and group ids to advantages.

Every estimator has the signature ``fn(scores, group_ids, **options) -> advantages``
with ``scores`` a float tensor (one per episode) and ``group_ids`` a long tensor (the
group of each episode; episodes of a group started from the same state). The result
is one scalar per episode; the trainer broadcasts it to every step and token.
"""

from __future__ import annotations

from typing import Callable

import torch

EPS = 1e-4  # as TRL: (r - mean) / (std + 1e-4)

AdvantageFn = Callable[..., torch.Tensor]
ADVANTAGES: dict[str, AdvantageFn] = {}


def register(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    def wrap(fn: AdvantageFn) -> AdvantageFn:
        ADVANTAGES[name] = fn
        return fn

    return wrap


def group_stats(scores: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-episode group mean, group std (unbiased, as torch.std) and group size."""
    _, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    n_groups = counts.numel()
    # Shift by one member of each group before summing, so a group of equal scores has a mean
    # exactly equal to them (a float32 sum of 8 x 0.7 divided by 8 is not 0.7) and advantage 0.
    pivot = torch.zeros(n_groups, dtype=scores.dtype).scatter_(0, inverse, scores)
    shifted = scores - pivot[inverse]
    means = pivot + torch.zeros(n_groups, dtype=scores.dtype).index_add_(0, inverse, shifted) / counts
    sq = torch.zeros(n_groups, dtype=scores.dtype).index_add_(0, inverse, (scores - means[inverse]) ** 2)
    std = torch.sqrt(sq / (counts - 1).clamp(min=1))
    return means[inverse], std[inverse], counts[inverse]


@register("grpo")
def grpo_advantage(scores: torch.Tensor, group_ids: torch.Tensor, scale: str = "group", **_) -> torch.Tensor:
    """GRPO (Shao et al., 2024, DeepSeekMath, Eq. 3 outcome supervision):

        A_i = (r_i - mean_j r_j) / (std_j r_j + eps)

    over the G episodes of the group. ``scale``: "group" divides by the group std,
    "batch" by the std of all scores in the batch (Hu et al., 2025, REINFORCE++),
    "none" not at all (Liu et al., 2025, Dr. GRPO).
    """
    mean, std, _ = group_stats(scores, group_ids)
    centred = scores - mean
    if scale == "group":
        return centred / (std + EPS)
    if scale == "batch":
        batch_std = scores.std() if scores.numel() > 1 else scores.new_zeros(())
        return centred / (batch_std + EPS)
    if scale == "none":
        return centred
    raise ValueError(f"grpo: scale must be 'group', 'batch' or 'none', got {scale!r}")


@register("dr_grpo")
def dr_grpo_advantage(scores: torch.Tensor, group_ids: torch.Tensor, **_) -> torch.Tensor:
    """Dr. GRPO (Liu et al., 2025, "Understanding R1-Zero-Like Training"): no std division,

        A_i = r_i - mean_j r_j
    """
    mean, _, _ = group_stats(scores, group_ids)
    return scores - mean


@register("rloo")
def rloo_advantage(scores: torch.Tensor, group_ids: torch.Tensor, **_) -> torch.Tensor:
    """REINFORCE leave-one-out (Kool et al., 2019; Ahmadian et al., 2024):

        A_i = r_i - 1/(G-1) * sum_{j != i} r_j = G/(G-1) * (r_i - mean_j r_j)

    A group of one has no baseline and gets A = 0.
    """
    mean, _, count = group_stats(scores, group_ids)
    count = count.to(scores.dtype)
    return torch.where(count > 1, count / (count - 1).clamp(min=1) * (scores - mean), torch.zeros_like(scores))


def compute_advantages(name: str, scores: torch.Tensor, group_ids: torch.Tensor, **options) -> torch.Tensor:
    if name not in ADVANTAGES:
        raise KeyError(f"unknown advantage estimator '{name}'; known: {sorted(ADVANTAGES)}")
    return ADVANTAGES[name](scores, group_ids, **options)
