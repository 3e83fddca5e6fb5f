"""The advantage phase: anchor groups, then the configured estimator, as one record of per-step tensors.

Every estimator is reached through the registry (``algos/advantages.py``), built-in or the
user's own. The built-ins read their options from the algorithm section (``scale_rewards``,
``gamma``, ...; see :data:`CONFIG_OPTIONS`); ``advantage_options`` adds or overrides options,
and an option the estimator does not declare is an error naming it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import torch

from grouprl.algos.advantages import Estimator, RewardParts, StepTensors, discounted_returns, run_estimator
from grouprl.algos.anchors import anchor_group_ids
from grouprl.config import ConfigError
from grouprl.records import Episode, Verdict
from grouprl.registry import options_from_config

log = logging.getLogger(__name__)

# estimator option -> the algorithm-section field that sets it (when the estimator declares it)
CONFIG_OPTIONS = {
    "scale": "scale_rewards",
    "gamma": "gamma",
    "step_advantage_weight": "step_advantage_weight",
    "norm": "gigpo_norm",
    "episode_stats": "episode_stats",
}


@dataclass
class AdvantageRecord:
    """One entry per step of the batch (episodes' steps contiguous, in order)."""

    episode: torch.Tensor  # (S,) long: the step's episode
    returns: torch.Tensor  # (S,) discounted return R_t = sum_k gamma^(k-t) r_k
    episode_advantage: torch.Tensor  # (S,) A_E (episode-level estimators: the advantage itself)
    step_advantage: torch.Tensor  # (S,) A_S (0 for episode-level estimators)
    advantage: torch.Tensor  # (S,) what the loss uses
    anchor: torch.Tensor  # (S,) long: anchor-group id
    anchor_size: torch.Tensor  # (S,) long: steps in the step's anchor group


def estimator_options(algorithm, estimator: Estimator) -> dict[str, Any]:
    """The options the estimator declares, from the config; unknown ``advantage_options`` are errors."""
    options = options_from_config(algorithm, CONFIG_OPTIONS, estimator.options, "advantage estimator", estimator.name)
    options.update(algorithm.advantage_options)
    estimator.check_options(options)
    return options


def compute_advantage_record(
    episodes: list[Episode],
    scores: torch.Tensor,
    step_rewards: list[list[float]],
    algorithm,
    estimator: Estimator,
    options: dict[str, Any],
    state_key: Callable | None = None,
    penalty_on_step: bool = False,
    parts: RewardParts | None = None,
) -> AdvantageRecord:
    """``scores`` and ``step_rewards`` are the verdicts' (``Verdict.score``, ``Verdict.step_rewards``), in the
    episodes' order. Anchor groups, the estimator, and (``penalty_on_step``, verl-agent's convention) each invalid step's
    penalty charged to that step alone: a step-level estimator receives it as ``steps.penalty`` (gigpo
    follows verl-agent's flow, see ``gigpo_parts``); an episode-level one's advantage is lowered by it,
    A_t <- A_t - p_t."""
    groups = torch.tensor([ep.group_id for ep in episodes])
    tensors = step_tensors(episodes, step_rewards, algorithm, state_key, penalty_on_step)
    # float64 throughout: with float32 a score of 1e30 overflows the group variance (1e60) and every
    # advantage becomes 0 -- nothing is learned, silently.
    out = checked_output(
        estimator,
        run_estimator(estimator, scores.to(torch.float64), groups, tensors, parts, **options),
        scores,
        len(tensors.episode),
    )
    record = advantage_record(estimator, out, tensors, algorithm.gamma)
    if penalty_on_step and not estimator.step_level:
        assert tensors.penalty is not None  # built whenever the penalty goes on the step
        record.episode_advantage = record.episode_advantage - tensors.penalty
        record.advantage = record.advantage - tensors.penalty
    if log.isEnabledFor(logging.DEBUG):
        log_groups(episodes, scores, record)
    return record


def step_tensors(
    episodes: list[Episode],
    step_rewards: list[list[float]],
    algorithm,
    state_key: Callable | None,
    penalty_on_step: bool,
) -> StepTensors:
    """Every step of the batch as tensors: its episode, reward, anchor group (same group, same state) and,
    with the penalty on the step, its invalid-action penalty."""
    steps = [(e, s) for e, ep in enumerate(episodes) for s in ep.steps]
    if [len(r) for r in step_rewards] != [len(ep.steps) for ep in episodes]:
        raise ValueError("step_rewards must hold one reward per step of each episode, in the episodes' order")
    anchors = anchor_group_ids(
        [episodes[e].group_id for e, _ in steps],
        [s.anchor_state for _, s in steps],
        algorithm.anchor_mode,
        algorithm.similarity_threshold,
        state_key,
    )
    return StepTensors(
        episode=torch.tensor([e for e, _ in steps], dtype=torch.long),
        rewards=torch.tensor([r for rewards in step_rewards for r in rewards], dtype=torch.float64),
        anchor=torch.tensor(anchors, dtype=torch.long),
        penalty=torch.tensor([s.penalty for _, s in steps], dtype=torch.float64) if penalty_on_step else None,
    )


def advantage_record(estimator: Estimator, out: Any, tensors: StepTensors, gamma: float) -> AdvantageRecord:
    """The record from the estimator's checked output. An episode-level estimator gives one value per episode
    (broadcast to its steps), a step-level one a value per step or a record of parts (gigpo); a part it
    leaves out takes its plain default."""
    if not estimator.step_level:
        advantage, parts = out[tensors.episode], None
    elif isinstance(out, torch.Tensor):
        advantage, parts = out, None
    else:
        advantage, parts = out.advantage, out
    returns = getattr(parts, "returns", None)
    episode_advantage = getattr(parts, "episode_advantage", None)
    step_advantage = getattr(parts, "step_advantage", None)
    anchor_size = getattr(parts, "anchor_size", None)
    return AdvantageRecord(
        tensors.episode,
        discounted_returns(tensors.rewards, tensors.episode, gamma) if returns is None else returns,
        advantage if episode_advantage is None else episode_advantage,
        torch.zeros(len(tensors.episode), dtype=torch.float64) if step_advantage is None else step_advantage,
        advantage,
        tensors.anchor,
        torch.bincount(tensors.anchor)[tensors.anchor] if anchor_size is None else anchor_size,
    )


class EstimatorOutputError(ConfigError):
    """An estimator (a user's, usually) returned what no loss can use: the wrong shape, or NaN/inf."""


def checked_output(estimator: Estimator, out: Any, scores: torch.Tensor, n_steps: int) -> Any:
    """The estimator's output when it is one finite value per episode (per step for a step-level one),
    else ``EstimatorOutputError`` naming the estimator, what it returned and what was expected."""
    level, n = ("step", n_steps) if estimator.step_level else ("episode", len(scores))
    values = out.advantage if estimator.step_level and hasattr(out, "advantage") else out
    where = f"advantage estimator '{estimator.name}'"
    try:
        tensor = values if isinstance(values, torch.Tensor) else torch.as_tensor(values, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise EstimatorOutputError(
            f"{where} returned {type(values).__name__}; expected a tensor of {n} values, one per {level}"
        ) from None
    if tuple(tensor.shape) != (n,) or not (tensor.is_floating_point() or tensor.dtype in (torch.int32, torch.int64)):
        raise EstimatorOutputError(
            f"{where} returned a {tensor.dtype} tensor of shape {tuple(tensor.shape)} for "
            f"{len(scores)} episodes ({n_steps} steps); expected shape ({n},), one value per "
            f"{level}"
        )
    bad = ~torch.isfinite(tensor.to(torch.float64))
    if bad.any() and torch.isfinite(scores).all():  # non-finite scores are the rewards' fault, reported there
        raise EstimatorOutputError(
            f"{where} returned NaN or inf for {int(bad.sum())} of {n} {level}s (first: "
            f"{level} {int(bad.nonzero()[0])}) from finite scores; expected finite values"
        )
    if isinstance(out, torch.Tensor) or not hasattr(out, "advantage"):
        return tensor.to(torch.float64)
    return out


def reward_parts(verdicts: list[Verdict], weights: dict[str, float]) -> RewardParts:
    """Each reward's score per episode (NaN where it gave none), for an estimator that declares ``parts``."""
    nan = float("nan")
    return RewardParts(
        {
            name: torch.tensor(
                [nan if (value := v.parts.get(name)) is None else float(value) for v in verdicts], dtype=torch.float64
            )
            for name in weights
        },
        dict(weights),
    )


def log_groups(episodes: list[Episode], scores: torch.Tensor, record: AdvantageRecord) -> None:
    """LOGLEVEL=DEBUG: per episode group, its anchor groups with their steps' returns and advantages."""
    by_group: dict[int, list[int]] = {}
    for e, ep in enumerate(episodes):
        by_group.setdefault(ep.group_id, []).append(e)
    first = torch.cumsum(torch.tensor([0] + [len(ep.steps) for ep in episodes]), 0).tolist()
    for g, members in by_group.items():
        anchors: dict[int, list[str]] = {}
        for e in members:
            for t in range(len(episodes[e].steps)):
                j = first[e] + t
                anchors.setdefault(int(record.anchor[j]), []).append(
                    f"e{episodes[e].index_in_group}t{t}: R={float(record.returns[j]):.3f} "
                    f"A_E={float(record.episode_advantage[j]):+.3f} A_S={float(record.step_advantage[j]):+.3f} "
                    f"A={float(record.advantage[j]):+.3f}"
                )
        log.debug(
            "group %d: scores %s; %d anchor groups (%d non-singleton)",
            g,
            [round(float(scores[e]), 3) for e in members],
            len(anchors),
            sum(len(v) > 1 for v in anchors.values()),
        )
        for anchor, lines in anchors.items():
            log.debug("  anchor %d (size %d): %s", anchor, len(lines), "; ".join(lines))
