"""The conversation a reward sees and the step rewards its ``step_outputs`` name."""

from __future__ import annotations

from typing import Any

from grouprl.records import Episode


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


def check_step_outputs(name: str, ep: Episode, step_outputs) -> str | None:
    """An error naming the episode when a ``StepOutput.step_index`` names no assistant turn."""
    for out in step_outputs:
        index = out.step_index
        if not isinstance(index, int) or not 0 <= index < len(ep.steps):
            return (f"{name}: step_outputs names step_index {index!r}, but episode (group {ep.group_id}, "
                    f"#{ep.index_in_group}) has assistant turns 0..{len(ep.steps) - 1}")
    return None


def align_step_rewards(step_rewards: list[float], step_outputs, weight: float = 1.0,
                       default_step_reward: float = 0.0) -> None:
    """Add ``weight * StepOutput.base_reward`` to the reward of the step whose assistant turn it names.

    ``step_index = i`` is the episode's i-th assistant turn (0-based), i.e. the action of
    its i-th step (see :func:`episode_messages`). Steps no output names get
    ``weight * default_step_reward``. Indices are checked by :func:`check_step_outputs` first.
    """
    named: dict[int, float] = {}
    for out in step_outputs:
        named[out.step_index] = named.get(out.step_index, 0.0) + out.base_reward
    for i in range(len(step_rewards)):
        step_rewards[i] += weight * named.get(i, default_step_reward)
