"""Advantage estimators: pure functions from episode scores (and step records) to advantages.

Every estimator is reached through the registry (:data:`ADVANTAGES`): built-ins by name, a
user's own as ``path/to/file.py:function`` or ``package.module:function``. An estimator's
signature is its declaration:

- ``fn(scores, group_ids, *, option=default, ...) -> (E,)`` is *episode-level*: ``scores`` is a
  float tensor (one per episode), ``group_ids`` a long tensor (episodes of a group started
  from the same state); the result is broadcast to every step of the episode.
- ``fn(scores, group_ids, steps, *, option=default, ...)`` is *step-level*: ``steps`` is a
  :class:`StepTensors`; it returns one value per step, or a record with ``advantage`` per step
  (and optionally ``returns``, ``episode_advantage``, ``step_advantage``, ``anchor_size``).

Its keyword parameters are its options; an option it does not declare is an error naming it
(no ``**kwargs``: a typo must not pass silently). An estimator that declares a ``parts`` parameter
also receives each reward's own score per episode (:class:`RewardParts`), not only their weighted
sum ``scores``: e.g. ``gdpo``, which normalises each reward within its group before summing.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import torch

from grouprl.registry import Registry, check_options

EPS = 1e-4  # as TRL: (r - mean) / (std + 1e-4)

AdvantageFn = Callable[..., Any]


@dataclass(frozen=True)
class Estimator:
    """A registered advantage estimator and what its signature declares."""

    name: str
    fn: AdvantageFn
    step_level: bool  # takes ``steps`` and returns one value (or a record) per step
    options: tuple[str, ...]  # its keyword options
    wants_parts: bool = False  # takes ``parts``: each reward's score per episode (RewardParts)

    def check_options(self, options: dict[str, Any]) -> None:
        check_options("advantage estimator", self.name, self.options, options)


def declare(name: str, fn: AdvantageFn) -> Estimator:
    """Read an estimator's declaration from its signature (see the module docstring)."""
    params = list(inspect.signature(fn).parameters.values())
    if any(p.kind is p.VAR_KEYWORD for p in params):
        raise TypeError(f"advantage estimator '{name}': declare every option as a keyword parameter, not **kwargs")
    positional = [p.name for p in params if p.default is p.empty and p.kind is not p.VAR_POSITIONAL]
    if positional[:2] != ["scores", "group_ids"] or len(positional) > 3:
        raise TypeError(
            f"advantage estimator '{name}': expected fn(scores, group_ids[, steps], *, options...), "
            f"got parameters {[p.name for p in params]}"
        )
    names = [p.name for p in params]
    options = tuple(n for n in names if n not in ("scores", "group_ids", "steps", "parts"))
    return Estimator(name, fn, "steps" in names, options, "parts" in names)


ESTIMATORS: Registry[Estimator] = Registry("advantage estimator", declare, config_key="advantage")
ADVANTAGES = ESTIMATORS  # name -> Estimator
register = ESTIMATORS.register  # @register("name") on a function of the declared form
get_estimator = ESTIMATORS.resolve  # a built-in by name, or 'path/to/file.py:function' / 'package.module:function'


@dataclass
class StepTensors:
    """Every step of a batch of episodes, flattened; an episode's steps are contiguous and in order."""

    episode: torch.Tensor  # (S,) long: index of the step's episode in ``scores``
    rewards: torch.Tensor  # (S,) float: step reward r_t
    anchor: torch.Tensor  # (S,) long: anchor-group id (see algos/anchors.py)
    # (S,) float: the invalid-action penalty p_t charged to the step alone (``invalid_penalty: on_step``);
    # None: no such charge (the penalty, if any, is already a step reward in ``rewards``)
    penalty: torch.Tensor | None = None


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
def grpo_advantage(
    scores: torch.Tensor, group_ids: torch.Tensor, scale: str = "group", epsilon: float = EPS
) -> torch.Tensor:
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
def dr_grpo_advantage(scores: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO (Liu et al., 2025, "Understanding R1-Zero-Like Training"): no std division,

    A_i = r_i - mean_j r_j
    """
    mean, _, _ = group_stats(scores, group_ids)
    return scores - mean


@register("rloo")
def rloo_advantage(scores: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
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


@register("gigpo")
def gigpo_parts(
    scores: torch.Tensor,
    group_ids: torch.Tensor,
    steps: StepTensors,
    gamma: float = 0.95,
    step_advantage_weight: float = 1.0,
    norm: str = "mean_norm",
    episode_stats: str = "episode",
    epsilon: float = 1e-6,
) -> GiGPOParts:
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

    A penalty charged to a step alone (``steps.penalty``, ``invalid_penalty: on_step``) follows
    verl-agent's ``apply_invalid_action_penalty`` then ``episode_norm_reward`` / ``step_norm_reward``:
    the step's row carries the score R_i - p_t and the return R_t - p_t *before* the group
    statistics, so with ``episode_stats="episode"`` an episode's first row (its score as verl-agent
    counts it) and with ``"per_step"`` every penalised row moves the group's mean and std.
    """
    if norm not in ("mean_norm", "mean_std_norm"):
        raise ValueError(f"gigpo: norm must be 'mean_norm' or 'mean_std_norm', got {norm!r}")
    if episode_stats not in ("episode", "per_step"):
        raise ValueError(f"gigpo: episode_stats must be 'episode' or 'per_step', got {episode_stats!r}")

    def normalize(values: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, std, count = group_stats(values, ids)
        centred = values - mean
        return (centred / (std + epsilon) if norm == "mean_std_norm" else centred), count

    penalty = torch.zeros_like(steps.rewards) if steps.penalty is None else steps.penalty.to(steps.rewards.dtype)
    row_scores = scores[steps.episode] - penalty.to(scores.dtype)
    if episode_stats == "episode":  # the statistics of each episode's first row, applied to every row
        first = torch.ones_like(steps.episode, dtype=torch.bool)
        first[1:] = steps.episode[1:] != steps.episode[:-1]
        mean, std, _ = group_stats(row_scores[first], group_ids[steps.episode[first]])
        episode_of_first = torch.zeros(scores.numel(), dtype=torch.long)
        episode_of_first[steps.episode[first]] = torch.arange(int(first.sum()))
        at = episode_of_first[steps.episode]
        centred = row_scores - mean[at]
        episode_adv = centred / (std[at] + epsilon) if norm == "mean_std_norm" else centred
    else:
        episode_adv = normalize(row_scores, group_ids[steps.episode])[0]
    returns = discounted_returns(steps.rewards, steps.episode, gamma)
    step_adv, anchor_size = normalize(returns - penalty, steps.anchor)
    step_adv = torch.where(anchor_size > 1, step_adv, torch.zeros_like(step_adv))
    return GiGPOParts(returns, episode_adv, step_adv, anchor_size, episode_adv + step_advantage_weight * step_adv)


@dataclass
class RewardParts:
    """Each reward's own score per episode, and its weight in the episode score."""

    scores: dict[str, torch.Tensor]  # reward name -> (E,) float; NaN where the reward gave no score
    weights: dict[str, float]  # reward name -> weight (as normalised for the episode score)


def _nan_group_stats(values: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-episode group mean and unbiased std over the members with a value (NaN-aware)."""
    mean, std = torch.full_like(values, float("nan")), torch.full_like(values, float("nan"))
    for g in torch.unique(group_ids):
        members = group_ids == g
        known = values[members & ~torch.isnan(values)]
        if known.numel():
            mean[members] = known.mean()
            std[members] = known.std() if known.numel() > 1 else known.new_zeros(())
    return mean, std


@register("gdpo")
def gdpo_advantage(
    scores: torch.Tensor, group_ids: torch.Tensor, parts: RewardParts, epsilon: float = EPS, batch_norm: bool = True
) -> torch.Tensor:
    """GDPO ("GDPO: Group reward-Decoupled Normalization Policy Optimization for Multi-reward RL",
    2026, arXiv:2601.05242): each reward k normalised within its group before the weighted sum,

        A'_i = sum_k w_k (r_{k,i} - mean_j r_{k,j}) / (std_j r_{k,j} + eps)
        A_i  = (A'_i - mean_batch A') / (std_batch A' + eps)      (``batch_norm``)

    so a reward with a small spread is not drowned by one with a large spread (with the plain
    sum, rewards of different scales reduce to the loudest one). A reward with no score for an
    episode (NaN) is left out of its statistics and its sum; an episode with no reward at all
    gets A = 0. TRL: ``multi_objective_aggregation="normalize_then_sum"``.
    """
    if not parts.scores:
        raise ValueError("gdpo: no reward parts (the task has no reward functions)")
    total = torch.zeros_like(scores)
    known = torch.zeros_like(scores, dtype=torch.bool)
    for name, values in parts.scores.items():
        values = values.to(scores.dtype)
        mean, std = _nan_group_stats(values, group_ids)
        normalised = (values - mean) / (std + epsilon)
        total = total + parts.weights[name] * torch.nan_to_num(normalised, nan=0.0)
        known |= ~torch.isnan(values)
    if batch_norm and bool(known.any()):
        kept = total[known]
        spread = kept.std() if kept.numel() > 1 else kept.new_zeros(())
        total = (total - kept.mean()) / (spread + epsilon)
    return torch.where(known, total, torch.zeros_like(total))


def run_estimator(
    estimator: Estimator,
    scores: torch.Tensor,
    group_ids: torch.Tensor,
    steps: StepTensors | None = None,
    parts: "RewardParts | None" = None,
    **options,
) -> Any:
    """The estimator's own output: per episode, or per step (a tensor or a record) for step-level ones."""
    estimator.check_options(options)
    if estimator.wants_parts:
        if parts is None:
            raise ValueError(f"advantage estimator '{estimator.name}' takes each reward's part: pass parts=RewardParts")
        options = {**options, "parts": parts}
    if estimator.step_level:
        if steps is None:
            raise ValueError(f"{estimator.name} is a step-level estimator: pass steps=StepTensors(...)")
        return estimator.fn(scores, group_ids, steps, **options)
    return estimator.fn(scores, group_ids, **options)


def step_advantages(
    name: str, scores: torch.Tensor, group_ids: torch.Tensor, steps: StepTensors, **options
) -> torch.Tensor:
    """One advantage per step: episode-level estimators are broadcast to their episode's steps."""
    estimator = get_estimator(name)
    out = run_estimator(estimator, scores, group_ids, steps, **options)
    if estimator.step_level:
        return out if isinstance(out, torch.Tensor) else out.advantage
    return out[steps.episode]
