"""From an environment's observation to the chat the policy sees, and from its reply to an action."""

from __future__ import annotations

import re
from dataclasses import dataclass

from grouprl.records import Observation

DEFAULT_ACTION_PATTERN = r"<action>(.*?)</action>"


def build_messages(
    instructions: str,
    history: list[tuple[str, str]],
    observation: Observation,
    history_length: int,
    show_admissible: bool = True,
) -> list[dict[str, str]]:
    """The prompt as chat messages.

    ``[system: instructions] + [user: o_k, assistant: a_k] for the last history_length pairs
    + [user: current observation (+ admissible actions)]``. History pairs are real chat turns,
    so a chat model sees its own earlier actions as its own. An observation that carries its
    own ``messages`` (a single-turn dataset row) is used as it is.
    """
    if observation.messages is not None:
        return observation.messages
    messages = [{"role": "system", "content": instructions}] if instructions else []
    window = history[-history_length:] if history_length > 0 else []
    for seen, action in window:
        messages += [{"role": "user", "content": seen}, {"role": "assistant", "content": action}]
    text = observation.text
    if show_admissible and observation.admissible_actions:
        text += "\nAdmissible actions: " + ", ".join(observation.admissible_actions)
    messages.append({"role": "user", "content": text})
    return messages


@dataclass
class ParsedAction:
    action: str | None  # what the environment receives; None = invalid (env not advanced)
    reason: str = ""  # why it is invalid


def parse_action(completion: str, pattern: str | None, admissible: list[str] | None) -> ParsedAction:
    """The action inside the last match of ``pattern`` (its first group), or the whole completion
    when ``pattern`` is empty. With admissible actions, it must be one of them (compared
    case-insensitively, returned in the admissible spelling)."""
    if pattern:
        found = re.findall(pattern, completion, flags=re.DOTALL)
        if not found:
            return ParsedAction(None, "no action tag")
        action = found[-1] if isinstance(found[-1], str) else found[-1][0]
    else:
        action = completion
    action = action.strip()
    if admissible:
        by_lower = {a.lower(): a for a in admissible}
        if action.lower() not in by_lower:
            return ParsedAction(None, f"inadmissible action {action[:40]!r}")
        action = by_lower[action.lower()]
    return ParsedAction(action)


def format_action(action: str, pattern: str | None) -> str:
    """The completion that carries ``action`` under ``pattern`` (the inverse of :func:`parse_action`)."""
    if not pattern:
        return action
    tag = re.fullmatch(r"<(\w+)>\(\.\*\?\)</\1>", pattern)
    if tag:
        return f"<{tag.group(1)}>{action}</{tag.group(1)}>"
    raise ValueError(f"no demonstration format for action_pattern {pattern!r}; use '<tag>(.*?)</tag>' or ''")
