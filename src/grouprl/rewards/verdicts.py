"""Verdict assembly: from every reward's part on an episode to its :class:`Verdict`, in one pass.

    B   = sum_f w_f * score_f + sum_t (env_reward_t - penalty_t)
    R   = B + sum_l w_l * D_l                 (D_l: learned reward l's score)
    R   = mixer.mix(B, sum_l w_l * D_l)       (with a mixer)

(with ``invalid_penalty: on_step`` the penalties are left out of B and r_t, and the advantage phase
charges each to its invalid step's advantage instead, as verl-agent does). Step rewards:
``r_t = env_reward_t - penalty_t``, plus, per reward function f, either ``w_f * base_reward`` on the
steps its ``step_outputs`` name (``w_f * default_step_reward`` on the others) or, when it gives no step
outputs, ``w_f * score_f`` on the last step; the learned part ``R - B`` goes on the last step too, so
without step outputs ``sum_t r_t = R``.

In order: each part's step outputs are checked (one naming no assistant turn makes that part an error),
each episode's verdict is built, the learned rewards score (a NaN, an exception or a timeout is an error
of the episode, as for a reward function), the batch's error budget is enforced, then the learned scores
are mixed in and each learned reward updates once.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Callable

import torch

from grouprl.records import Episode, Verdict
from grouprl.rewards.guard import RewardFailure
from grouprl.rewards.learned.checked_scores import checked_scores
from grouprl.rewards.learned.protocol import LearnedReward, RewardMixer
from grouprl.rewards.registry import is_typed, weighted_score
from grouprl.rewards.reward_calls import RewardPart

log = logging.getLogger(__name__)


@dataclass
class VerdictRules:
    """How parts become verdicts: the weights, the step-reward rules, what counts as correct."""

    weights: dict[str, float]  # reward key -> its (normalised) weight
    default_step_reward: float = 0.0
    penalty_in_rewards: bool = True  # False: invalid_penalty on_step (charged in the advantage)
    judge: Callable[..., Any] | None = None  # the correctness judge (a reward, or resolved on its own)
    judge_key: str | None = None  # set when the judge is one of the rewards: its part is read
    predict: Callable[[str], Any] | None = None  # the task's answer parser
    max_error_fraction: float = 1.0
    reward_timeout: float = 0.0  # seconds for a learned reward's score call (0: none)


def check_step_outputs(name: str, ep: Episode, step_outputs) -> str | None:
    """An error naming the episode when a ``StepOutput.step_index`` names no assistant turn."""
    for out in step_outputs:
        index = out.step_index
        if not isinstance(index, int) or not 0 <= index < len(ep.steps):
            return (
                f"{name}: step_outputs names step_index {index!r}, but episode (group {ep.group_id}, "
                f"#{ep.index_in_group}) has assistant turns 0..{len(ep.steps) - 1}"
            )
    return None


def align_step_rewards(
    step_rewards: list[float], step_outputs, weight: float = 1.0, default_step_reward: float = 0.0
) -> None:
    """Add ``weight * StepOutput.base_reward`` to the reward of the step whose assistant turn it names.

    ``step_index = i`` is the episode's i-th assistant turn (0-based), i.e. the action of its i-th step
    (``rewards/reward_calls.py: episode_messages``). Steps no output names get ``weight * default_step_reward``.
    Indices are checked by :func:`check_step_outputs` first.
    """
    named: dict[int, float] = {}
    for out in step_outputs:
        named[out.step_index] = named.get(out.step_index, 0.0) + out.base_reward
    for i in range(len(step_rewards)):
        step_rewards[i] += weight * named.get(i, default_step_reward)


def checked_parts(episodes: list[Episode], parts: dict[str, list[RewardPart]]) -> dict[str, list[RewardPart]]:
    """The parts with every invalid ``step_outputs`` turned into that sample's error (score dropped)."""
    out: dict[str, list[RewardPart]] = {}
    for key, column in parts.items():
        out[key] = []
        for ep, part in zip(episodes, column):
            error = check_step_outputs(key, ep, part.step_outputs) if part.step_outputs and not part.error else None
            out[key].append(
                part if error is None else dataclasses.replace(part, score=None, error=error, step_outputs=None)
            )
    return out


def episode_verdict(ep: Episode, mine: dict[str, RewardPart], rules: VerdictRules) -> Verdict:
    """One episode's verdict from its reward parts (before learned rewards)."""
    env_rewards = [step.env_reward - (step.penalty if rules.penalty_in_rewards else 0.0) for step in ep.steps]
    verdict = Verdict(
        parts={key: part.score for key, part in mine.items()},
        errors=[part.error for part in mine.values() if part.error],
        reasons={key: part.reason for key, part in mine.items() if part.reason},
        step_rewards=list(env_rewards),
    )
    for key, part in mine.items():
        if part.step_outputs:
            align_step_rewards(verdict.step_rewards, part.step_outputs, rules.weights[key], rules.default_step_reward)
        elif part.score is not None and ep.steps:
            verdict.step_rewards[-1] += rules.weights[key] * part.score
    verdict.score = weighted_score(verdict.parts, rules.weights) + sum(env_rewards)
    answer = ep.steps[-1].action_text if ep.steps else ""
    if rules.judge is None:
        verdict.correct = ep.success
    elif rules.judge_key is not None:  # the judge is one of the rewards (typed or TRL too): its 1.0
        verdict.correct = verdict.parts[rules.judge_key] == 1.0
    else:
        verdict.correct = (not is_typed(rules.judge)) and rules.judge(answer, ep.row.get("ground_truth")) == 1.0
    verdict.prediction = rules.predict(answer) if rules.predict is not None else None
    return verdict


def enforce_error_budget(verdicts: list[Verdict], max_error_fraction: float) -> dict[str, float]:
    """The batch's error counts; ``RewardFailure`` when more than ``max_error_fraction`` of its samples failed."""
    failed = sum(bool(v.errors) for v in verdicts)
    fraction = failed / max(len(verdicts), 1)
    if failed:
        first = next(e for v in verdicts for e in v.errors)
        log.warning("reward errors on %d of %d samples, e.g. %s", failed, len(verdicts), first)
        if fraction > max_error_fraction:
            raise RewardFailure(
                f"{failed} of {len(verdicts)} samples failed in reward functions "
                f"(> max_reward_error_fraction={max_error_fraction}); first error: {first}"
            )
    return {"reward_errors": float(failed), "reward_error_fraction": fraction}


def learned_scores(
    episodes: list[Episode],
    verdicts: list[Verdict],
    learned: list[LearnedReward],
    learned_weights: list[float],
    timeout: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """sum_l w_l * D_l per episode, and which episodes every learned reward scored without error. A failed
    (NaN, raised, timed out) or absent D_l counts 0; its error joins the verdict's, so it counts against the
    error budget like a reward function's (``rewards/learned/checked_scores.py``)."""
    total = torch.zeros(len(episodes), dtype=torch.float32)
    valid = torch.ones(len(episodes), dtype=torch.bool)
    for reward, weight in zip(learned, learned_weights):
        scores, errors = checked_scores(reward, episodes, timeout)
        for i, (verdict, score, error) in enumerate(zip(verdicts, scores, errors)):
            verdict.parts[reward.name] = score
            if error is not None:
                verdict.errors.append(error)
                valid[i] = False
            if score is not None:
                total[i] += weight * score
    return total, valid


def add_learned(
    episodes: list[Episode],
    verdicts: list[Verdict],
    learned: list[LearnedReward],
    total: torch.Tensor,
    valid: torch.Tensor,
    mixer: RewardMixer | None,
    evaluating: bool,
) -> dict[str, float]:
    """Mix the learned scores into the verdicts' scores (the difference on the last step's reward), then
    update each learned reward once (never while ``evaluating``: scored only, and no gathers either)."""
    base = torch.tensor([v.score for v in verdicts], dtype=torch.float32)
    final = mixer.mix(base, total) if mixer is not None else base + total
    for verdict, b, r in zip(verdicts, base.tolist(), final.tolist()):
        verdict.score = r
        if verdict.step_rewards:
            verdict.step_rewards[-1] += r - b
    metrics: dict[str, float] = {}
    if evaluating:
        return metrics
    # A frozen learner (GAIL_EVAL_MODE=1, GAIL_TRAIN=0) skips its step inside update() but still reports its
    # metrics, so a frozen run logs alpha, beta and the discriminator every step too.
    for reward in learned:
        metrics.update(reward.update(episodes))
    if mixer is not None:  # this process's B and D (the mixer gathers every process's); a failed D_l does not steer it
        metrics.update(mixer.update(base[valid], total[valid]))
    return metrics


def assemble_verdicts(
    episodes: list[Episode],
    parts: dict[str, list[RewardPart]],
    rules: VerdictRules,
    learned: list[LearnedReward],
    learned_weights: list[float],
    mixer: RewardMixer | None,
    evaluating: bool,
) -> tuple[list[Verdict], dict[str, list[RewardPart]], dict[str, float]]:
    """Every episode's verdict, the checked parts and the metrics of the assembly (errors, learned rewards)."""
    parts = checked_parts(episodes, parts)
    verdicts = [
        episode_verdict(ep, {key: column[i] for key, column in parts.items()}, rules) for i, ep in enumerate(episodes)
    ]
    scored = learned_scores(episodes, verdicts, learned, learned_weights, rules.reward_timeout) if learned else None
    metrics = enforce_error_budget(verdicts, rules.max_error_fraction)  # the learned rewards' errors count too
    if scored is not None:
        metrics.update(add_learned(episodes, verdicts, learned, *scored, mixer, evaluating))
    return verdicts, parts, metrics
