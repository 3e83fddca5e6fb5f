"""The parts the scorer (``rewards/scorer.py``) is built from: resolving a reward name (sandboxed or
not), binding recipe options, the conversation a reward sees, and step rewards from ``step_outputs``."""

from __future__ import annotations

import functools
from typing import Any

from grouprl.records import Episode
from grouprl.rewards.kit import with_options
from grouprl.rewards.registry import get_reward, is_typed


def sandboxed_file(name: str, sandbox_user_rewards: bool) -> str | None:
    """The file of a 'path/to/file.py:function' reward that must run in the sandbox, else None."""
    where = name.rpartition(":")[0]
    return where if sandbox_user_rewards and where.endswith(".py") else None


def resolve_reward(name: str, sandbox_user_rewards: bool = False):
    """The reward function for ``name``; a sandboxed file is wrapped, never imported here, and with
    ``sandbox_user_rewards`` anything that would be imported instead is refused (``KeyError``)."""
    if sandbox_user_rewards:
        from grouprl.rewards.registry import REWARDS
        from grouprl.rewards.sandboxed import refuse_unsandboxed, sandboxed_reward

        refuse_unsandboxed(name, REWARDS)
        if sandboxed_file(name, sandbox_user_rewards):
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
