"""Score episodes: every reward function on every episode, weighted into one score per episode."""

from __future__ import annotations

import functools
import logging
from typing import Any

from grouprl.records import Episode
from grouprl.rewards import arithmetic, gsm8k
from grouprl.rewards.kit import score_batch, with_options
from grouprl.rewards.registry import get_reward, is_typed, normalized_weights, weighted_score

log = logging.getLogger(__name__)
_PREDICTORS = {"gsm8k_final": gsm8k.extract_final, "arithmetic_exact": arithmetic.parse_answer}


def sandboxed_file(name: str, sandbox_user_rewards: bool) -> str | None:
    """The file of a 'path/to/file.py:function' reward that must run in the sandbox, else None."""
    where = name.rpartition(":")[0]
    return where if sandbox_user_rewards and where.endswith(".py") else None


def resolve_reward(name: str, sandbox_user_rewards: bool = False):
    """The reward function for ``name``; a sandboxed file is wrapped, never imported here."""
    if sandboxed_file(name, sandbox_user_rewards):
        from grouprl.rewards.sandboxed import sandboxed_reward

        return sandboxed_reward(name)
    return get_reward(name)


def bind_options(fn, options: dict | None):
    """The reward with recipe options bound as keyword arguments (typed rewards stay typed)."""
    if not options:
        return fn
    return with_options(fn, **options) if is_typed(fn) else functools.partial(fn, **options)


class RewardFailure(RuntimeError):
    """More of a batch's samples failed in reward functions than the run allows."""


def episode_messages(ep: Episode) -> list[dict[str, Any]]:
    """The whole conversation of an episode, as reward functions see it.

    The first step's prompt (system + first observation), then for every step its action as
    an assistant turn, each followed by the next step's observation as a user turn. So the
    i-th assistant turn (``step_index = i``) is the action of step i. For a single-turn
    episode this is the prompt plus the completion.
    """
    if not ep.steps:
        return []
    messages = list(ep.steps[0].messages or [])
    for i, step in enumerate(ep.steps):
        if i:
            messages.append({"role": "user", "content": step.observation})
        messages.append({"role": "assistant", "content": step.action_text})
    return messages


Part = tuple[float | None, str | None, list | None]  # (score, error, step_outputs)


def _typed_parts(name: str, fn, episodes: list[Episode]) -> list[Part]:
    rows = [{k: v for k, v in ep.row.items() if k != "ground_truth"} for ep in episodes]
    columns = {k: [r.get(k) for r in rows] for k in {k for r in rows for k in r}}
    columns["group_ids"] = [ep.group_id for ep in episodes]  # group-level rewards (length) need the groups
    try:
        results = score_batch(fn, [episode_messages(ep) for ep in episodes],
                              [ep.row.get("ground_truth") for ep in episodes], **columns)
    except Exception as err:  # noqa: BLE001 - one failing reward must not kill the run
        return [(None, f"{name}: {type(err).__name__}: {err}", None)] * len(episodes)
    out: list[Part] = []
    for ep, r in zip(episodes, results):
        error = r.error and f"{name}: {r.error}"
        if r.step_outputs and error is None:
            error = check_step_outputs(name, ep, r.step_outputs)
        valid = r.is_score_valid and error is None
        out.append((r.score if valid else None, error, r.step_outputs if valid else None))
        if r.reason:
            ep.reward_reasons[name] = r.reason
    return out


def check_step_outputs(name: str, ep: Episode, step_outputs) -> str | None:
    """An error naming the episode when a ``StepOutput.step_index`` names no assistant turn."""
    for out in step_outputs:
        index = out.step_index
        if not isinstance(index, int) or not 0 <= index < len(ep.steps):
            return (f"{name}: step_outputs names step_index {index!r}, but episode (group {ep.group_id}, "
                    f"#{ep.index_in_group}) has assistant turns 0..{len(ep.steps) - 1}")
    return None


def align_step_rewards(ep: Episode, step_outputs, weight: float = 1.0, default_step_reward: float = 0.0) -> None:
    """Add ``weight * StepOutput.base_reward`` to the step whose assistant turn it names.

    ``step_index = i`` is the episode's i-th assistant turn (0-based), i.e. the action of
    its i-th step (see :func:`episode_messages`). Steps no output names get
    ``weight * default_step_reward``. Indices are checked by :func:`check_step_outputs` first.
    """
    named: dict[int, float] = {}
    for out in step_outputs:
        named[out.step_index] = named.get(out.step_index, 0.0) + out.base_reward
    for i, step in enumerate(ep.steps):
        step.reward += weight * named.get(i, default_step_reward)


def _plain_part(name: str, fn, ep: Episode) -> Part:
    extra = {k: v for k, v in ep.row.items() if k != "ground_truth"}
    try:
        return fn(ep.steps[-1].action_text if ep.steps else "", ep.row.get("ground_truth"), **extra), None, None
    except Exception as err:  # noqa: BLE001
        return None, f"{name}: {type(err).__name__}: {err}", None


def score_episodes(episodes: list[Episode], reward_names: list[str], weights: list[float],
                   correct_reward: str | None, normalize_weights: bool = True,
                   max_error_fraction: float = 1.0, options: dict[str, dict] | None = None,
                   sandbox_user_rewards: bool = False, default_step_reward: float = 0.0) -> dict[str, float]:
    """Fill ``reward_parts``, ``reward_errors``, ``score``, step ``reward``s, ``prediction`` and
    ``correct`` in place.

    Episode score: ``R = sum_f w_f * score_f + sum_t (env_reward_t - penalty_t)``.
    Step rewards: ``r_t = env_reward_t - penalty_t``, plus, per reward function f, either
    ``w_f * base_reward`` on the steps its ``step_outputs`` name (``w_f * default_step_reward``
    on the others), or, when it gives no step outputs, ``w_f * score_f`` on the last step (an
    outcome reward). Without step outputs ``sum_t r_t = R``.
    ``correct``: the ``correct_reward`` judge gives 1.0, or, with none, the environment
    reported success.

    A sample whose reward raised keeps ``None`` for that reward and the error text; the run
    stops (``RewardFailure``) only when more than ``max_error_fraction`` of the samples failed.
    Returns reward metrics for the step.
    """
    fns = {name: bind_options(resolve_reward(name, sandbox_user_rewards), (options or {}).get(name))
           for name in reward_names}
    wmap = dict(zip(reward_names, normalized_weights(weights, normalize_weights)))
    parts: dict[str, list[Part]] = {}
    for name, fn in fns.items():
        parts[name] = _typed_parts(name, fn, episodes) if is_typed(fn) else [_plain_part(name, fn, ep)
                                                                               for ep in episodes]
    judge = get_reward(correct_reward) if correct_reward else None
    predictor = _PREDICTORS.get(correct_reward or "")
    failed = 0
    for i, ep in enumerate(episodes):
        ep.reward_parts = {name: parts[name][i][0] for name in fns}
        ep.reward_errors = [parts[name][i][1] for name in fns if parts[name][i][1]]
        failed += bool(ep.reward_errors)
        for step in ep.steps:
            step.reward = step.env_reward - step.penalty
        for name in fns:
            value, _, step_outputs = parts[name][i]
            if step_outputs:
                align_step_rewards(ep, step_outputs, wmap[name], default_step_reward)
            elif value is not None and ep.steps:
                ep.steps[-1].reward += wmap[name] * value
        ep.score = weighted_score(ep.reward_parts, wmap) + sum(s.env_reward - s.penalty for s in ep.steps)
        answer = ep.steps[-1].action_text if ep.steps else ""
        if judge is None:
            ep.correct = ep.success
        else:
            ep.correct = (not is_typed(judge)) and judge(answer, ep.row.get("ground_truth")) == 1.0
        ep.prediction = predictor(answer) if predictor else None
    fraction = failed / max(len(episodes), 1)
    if failed:
        log.warning("reward errors on %d of %d samples, e.g. %s", failed, len(episodes),
                    next(e for ep in episodes for e in ep.reward_errors))
    if fraction > max_error_fraction:
        raise RewardFailure(f"{failed} of {len(episodes)} samples failed in reward functions "
                            f"(> max_reward_error_fraction={max_error_fraction}); first error: "
                            f"{next(e for ep in episodes for e in ep.reward_errors)}")
    return {"reward_errors": float(failed), "reward_error_fraction": fraction}
