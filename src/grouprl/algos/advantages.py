"""Advantage estimators: pure functions from episode scores (and step records) to advantages.

Episode-level estimators (grpo, dr_grpo, rloo) have the signature
``fn(scores, group_ids, **options) -> advantages`` with ``scores`` a float tensor (one per
episode) and ``group_ids`` a long tensor (the group of each episode; episodes of a group
started from the same state); the result, one scalar per episode, is broadcast to every
step of the episode. Step-level estimators (gigpo) also take ``steps`` (:class:`StepTensors`)
and return one scalar per step. :func:`step_advantages` calls either kind and always
returns one scalar per step, which the loss broadcasts to that step's action tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

EPS = 1e-4  # as TRL: (r - mean) / (std + 1e-4)

AdvantageFn = Callable[..., torch.Tensor]
ADVANTAGES: dict[str, AdvantageFn] = {}
STEP_LEVEL: set[str] = set()  # estimators that take ``steps`` and return one value per step


def register(name: str, step_level: bool = False) -> Callable[[AdvantageFn], AdvantageFn]:
    def wrap(fn: AdvantageFn) -> AdvantageFn:
        ADVANTAGES[name] = fn
        if step_level:
            STEP_LEVEL.add(name)
        return fn

    return wrap


@dataclass
class StepTensors:
    """Every step of a batch of episodes, flattened; an episode's steps are contiguous and in order."""

    episode: torch.Tensor  # (S,) long: index of the step's episode in ``scores``
    rewards: torch.Tensor  # (S,) float: step reward r_t
    anchor: torch.Tensor  # (S,) long: anchor-group id (see algos/anchors.py)


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
def grpo_advantage(scores: torch.Tensor, group_ids: torch.Tensor, scale: str = "group", epsilon: float = EPS,
                   **_) -> torch.Tensor:
    """GRPO (Shao et al., 2024, DeepSeekMath, Eq. 3 outcome supervision):

        A_i = (r_i - mean_j r_j) / (std_j r_j + eps)

    over the G episodes of the group. ``scale``: "group" divides by the group std,
    "batch" by the std of all scores in the batch (Hu et al., 2025, REINFORCE++),
    "none" not at all (Liu et al., 2025, Dr. GRPO).
    """
    mean, std, _ = group_stats(scores, group_ids)
    centred = scores - mean
    if scale == "group":
        return centred / (std + epsilon)
    if scale == "batch":
        batch_std = scores.std() if scores.numel() > 1 else scores.new_zeros(())
        return centred / (batch_std + epsilon)
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


def discounted_returns(rewards: torch.Tensor, episode: torch.Tensor, gamma: float) -> torch.Tensor:
    """R_t = sum_{k >= t} gamma^(k - t) r_k within each episode (steps contiguous, in order)."""
    out = [0.0] * rewards.numel()
    r, e = rewards.tolist(), episode.tolist()
    running, current = 0.0, None
    for t in range(len(r) - 1, -1, -1):
        if e[t] != current:  # a new episode (walking backwards): its last step starts the sum
            running, current = 0.0, e[t]
        running = r[t] + gamma * running
        out[t] = running
    return torch.tensor(out, dtype=rewards.dtype)


@dataclass
class GiGPOParts:
    returns: torch.Tensor  # (S,) discounted return R_t
    episode_advantage: torch.Tensor  # (S,) A_E of the step's episode
    step_advantage: torch.Tensor  # (S,) A_S
    anchor_size: torch.Tensor  # (S,) number of steps in the step's anchor group
    advantage: torch.Tensor  # (S,) A_E + omega * A_S


def gigpo_parts(scores: torch.Tensor, group_ids: torch.Tensor, steps: StepTensors, gamma: float = 0.95,
                step_advantage_weight: float = 1.0, norm: str = "mean_norm", episode_stats: str = "episode",
                epsilon: float = 1e-6) -> GiGPOParts:
    """GiGPO (Feng et al., 2025, "Group-in-Group Policy Optimization for LLM Agent Training").

    Episode level (Eq. 3), over the G episodes of a group with scores R_i:

        A_E(i) = (R_i - mean_j R_j) / F

    (``episode_stats="per_step"``: mean and std over every *step* of the group, each step
    carrying its episode's score, as verl-agent computes it, so longer episodes weigh more).

    Step level (Eq. 5-6), with discounted returns R_t = sum_{k>=t} gamma^(k-t) r_k and anchor
    groups U of steps (across the group's episodes) whose environment state is the same:

        A_S(t) = (R_t - mean_{u in U} R_u) / F        (a singleton U gives A_S = 0)

    F = std + epsilon (``norm="mean_std_norm"``) or 1 (``"mean_norm"``, the default; the
    paper's and verl-agent's unbiased mode). Combined (Eq. 7): A = A_E + omega * A_S.
    """
    if norm not in ("mean_norm", "mean_std_norm"):
        raise ValueError(f"gigpo: norm must be 'mean_norm' or 'mean_std_norm', got {norm!r}")
    if episode_stats not in ("episode", "per_step"):
        raise ValueError(f"gigpo: episode_stats must be 'episode' or 'per_step', got {episode_stats!r}")

    def normalize(values: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, std, count = group_stats(values, ids)
        centred = values - mean
        return (centred / (std + epsilon) if norm == "mean_std_norm" else centred), count

    if episode_stats == "episode":
        episode_adv = normalize(scores, group_ids)[0][steps.episode]
    else:
        episode_adv = normalize(scores[steps.episode], group_ids[steps.episode])[0]
    returns = discounted_returns(steps.rewards, steps.episode, gamma)
    step_adv, anchor_size = normalize(returns, steps.anchor)
    step_adv = torch.where(anchor_size > 1, step_adv, torch.zeros_like(step_adv))
    return GiGPOParts(returns, episode_adv, step_adv, anchor_size,
                      episode_adv + step_advantage_weight * step_adv)


@register("gigpo", step_level=True)
def gigpo_advantage(scores: torch.Tensor, group_ids: torch.Tensor, steps: StepTensors | None = None,
                    **options) -> torch.Tensor:
    """GiGPO: A = A_E + omega * A_S per step (see :func:`gigpo_parts` for the equations)."""
    if steps is None:
        raise ValueError("gigpo is a step-level estimator: pass steps=StepTensors(...)")
    known = {"gamma", "step_advantage_weight", "norm", "episode_stats", "epsilon"}
    return gigpo_parts(scores, group_ids, steps, **{k: v for k, v in options.items() if k in known}).advantage


def compute_advantages(name: str, scores: torch.Tensor, group_ids: torch.Tensor, **options) -> torch.Tensor:
    """The registered estimator's output: per episode, or per step for step-level ones."""
    if name not in ADVANTAGES:
        raise KeyError(f"unknown advantage estimator '{name}'; known: {sorted(ADVANTAGES)}")
    return ADVANTAGES[name](scores, group_ids, **options)


def step_advantages(name: str, scores: torch.Tensor, group_ids: torch.Tensor, steps: StepTensors,
                    **options) -> torch.Tensor:
    """One advantage per step: episode-level estimators are broadcast to their episode's steps."""
    if name in STEP_LEVEL:
        return compute_advantages(name, scores, group_ids, steps=steps, **options)
    return compute_advantages(name, scores, group_ids, **options)[steps.episode]
