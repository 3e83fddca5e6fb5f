"""Calling the reward functions on a batch of episodes: one :class:`RewardPart` per reward and episode.

Failure rule: a reward is called on the whole batch; if that call raises, it is called sample by sample,
so only the failing samples lose it. A failed sample keeps ``None`` for that reward and an error
``"<reward>: <ExceptionType>: <message>"`` (the verdict assembly, ``rewards/verdicts.py``, counts them
against ``max_reward_error_fraction``). Every call runs under the time budget of ``rewards/guard.py``;
rewards that wait on a server (judges) run in their own thread while the others compute.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from grouprl.config import ConfigError
from grouprl.records import Episode
from grouprl.rewards.guard import RewardTimeout, call_with_timeout, finite_score, map_with_timeout
from grouprl.rewards.kit import RewardFunctionError, score_batch
from grouprl.rewards.registry import is_typed


def episode_messages(ep: Episode) -> list[dict[str, Any]]:
    """The whole conversation of an episode, as reward functions see it.

    The first step's prompt (system + first observation), then for every step its action as
    an assistant turn, each followed by the next step's observation as a user turn. So the
    i-th assistant turn (``step_index = i``) is the action of step i. For a single-turn
    episode this is the prompt plus the completion; for a conversation episode, the conversation
    (tool messages between the assistant turns, which keep their order).
    """
    if not ep.steps:
        return []
    if ep.conversation:  # the chat itself: assistant turns with their tool_calls, tool messages, the last turn
        return list(ep.steps[-1].messages or []) + [{"role": "assistant", "content": ep.steps[-1].action_text}]
    messages = list(ep.steps[0].messages or [])
    for i, step in enumerate(ep.steps):
        if i:
            messages.append({"role": "user", "content": step.observation})
        messages.append({"role": "assistant", "content": step.action_text})
    return messages


@dataclass
class RewardPart:
    """One reward function's verdict on one episode."""

    score: float | None = None  # None: no opinion, or failed (then ``error`` says why)
    error: str | None = None
    step_outputs: list | None = None
    reason: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)  # typed rewards' named sub-scores


def unique_keys(names: list[str]) -> list[str]:
    """Names as keys; a name given twice gets '#2', '#3', ..."""
    seen: dict[str, int] = {}
    keys = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        keys.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return keys


def _error(key: str, err: BaseException) -> str:
    return f"{key}: {type(err).__name__}: {err}"


class RewardTypeError(ConfigError):
    """A reward returned something that is not a number: its author's bug, reported as bad input."""


def _typed_part(key: str, result) -> RewardPart:
    error = result.error and f"{key}: {result.error}"
    if error is None and result.is_score_valid:
        error = finite_score(key, result.score)[1]  # NaN / inf: an error of this sample, never a score
    valid = result.is_score_valid and error is None
    metrics = {
        k: {"score": m.score, "is_score_valid": m.is_score_valid, "reason": m.reason} for k, m in result.metrics.items()
    }
    return RewardPart(
        float(result.score) if valid else None, error, result.step_outputs if valid else None, result.reason, metrics
    )


# A per-sample budget for a whole batch also pays for one sandbox start-up and the file's imports.
BATCH_STARTUP_S = 15.0


def _typed_parts(key: str, fn, episodes: list[Episode], timeout: float) -> list[RewardPart]:
    """A pointwise reward: one call per sample, each with its own budget (an endless program costs its
    own sample). A batch reward: one call for the batch, under one budget, or under ``timeout`` per
    sample when it bounds each sample itself (``budget="per_sample"``: sandboxed user rewards)."""
    per_sample = getattr(fn, "budget", "per_call") == "per_sample"

    def columns_of(batch: list[Episode]) -> dict[str, list]:
        rows = [{k: v for k, v in ep.row.items() if k != "ground_truth"} for ep in batch]
        columns: dict[str, Any] = {k: [r.get(k) for r in rows] for k in {k for r in rows for k in r}}
        columns["group_ids"] = [ep.group_id for ep in batch]  # group-level rewards (length) need the groups
        if per_sample:
            columns["sample_timeout"] = timeout or None
        return columns

    def call(batch: list[Episode]):
        budget = timeout * len(batch) + BATCH_STARTUP_S if per_sample and timeout else timeout
        return call_with_timeout(
            score_batch,
            budget,
            fn,
            [episode_messages(ep) for ep in batch],
            [ep.row.get("ground_truth") for ep in batch],
            name=key,
            **columns_of(batch),
        )

    if fn.reward_mode == "pointwise":
        calls = [((fn, [episode_messages(ep)], [ep.row.get("ground_truth")]), columns_of([ep])) for ep in episodes]
        out = []
        for value, err in map_with_timeout(score_batch, timeout, calls, name=key):
            try:
                out.append(RewardPart(error=_error(key, err)) if err is not None else _typed_part(key, value[0]))
            except Exception as bad:  # noqa: BLE001 - a malformed result is this sample's error
                out.append(RewardPart(error=_error(key, bad)))
        return out
    try:
        return [_typed_part(key, r) for r in call(episodes)]
    except (RewardTimeout, RewardFunctionError) as err:  # the call's error: a stuck reward, a wrong count or type
        return [RewardPart(error=_error(key, err)) for _ in episodes]
    except Exception as err:  # noqa: BLE001 - find the failing samples one by one below
        if len(episodes) == 1:
            return [RewardPart(error=_error(key, err))]
    out = []
    for ep in episodes:
        try:
            out.append(_typed_part(key, call([ep])[0]))
        except Exception as err:  # noqa: BLE001 - one failing sample must not fail the others
            out.append(RewardPart(error=_error(key, err)))
    return out


def _plain_parts(key: str, fn, episodes: list[Episode], timeout: float) -> list[RewardPart]:
    """One call per episode, each with the time budget; after a timeout the rest of the batch is
    not tried (a stuck reward costs one budget per batch, not one per sample)."""
    calls = [
        (
            (ep.steps[-1].action_text if ep.steps else "", ep.row.get("ground_truth")),
            {k: v for k, v in ep.row.items() if k != "ground_truth"},
        )
        for ep in episodes
    ]
    out: list[RewardPart] = []
    for ep, (value, err) in zip(episodes, map_with_timeout(fn, timeout, calls, name=key)):
        if err is not None:
            out.append(RewardPart(error=_error(key, err)))
            continue
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise RewardTypeError(
                f"reward '{key}' returned {type(value).__name__} {value!r:.60} for a sample "
                f"(group {ep.group_id}); expected a float or None"
            )
        score, error = finite_score(key, value)
        out.append(RewardPart(score, error))
    return out


def call_rewards(
    fns: dict[str, Any], episodes: list[Episode], timeout: float, io_pool: ThreadPoolExecutor | None
) -> dict[str, list[RewardPart]]:
    """Every reward's part on every episode (reward key -> one part per episode, in the episodes' order).
    ``io_pool``: the run's threads for rewards that wait on a server (``None``: call them here)."""

    def parts(key: str, fn) -> list[RewardPart]:
        return _typed_parts(key, fn, episodes, timeout) if is_typed(fn) else _plain_parts(key, fn, episodes, timeout)

    waiting = [key for key, fn in fns.items() if getattr(fn, "waits_on_network", False)]
    if io_pool is None or not waiting or len(fns) == 1:
        return {key: parts(key, fn) for key, fn in fns.items()}
    pending = {key: io_pool.submit(parts, key, fns[key]) for key in waiting}
    done = {key: parts(key, fn) for key, fn in fns.items() if key not in pending}
    done.update({key: future.result() for key, future in pending.items()})
    return {key: done[key] for key in fns}
