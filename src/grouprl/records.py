"""Records passed between modules: the contract of the engine.

Everything is an episode. A single-turn question is an episode of one step; a
multi-step agent task is an episode of many. Episodes that start from the same
initial state share a ``group_id`` and are normalised against each other.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any


def stable_id(text: str) -> str:
    """A short hash that is the same across processes and runs (unlike ``hash``)."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


@dataclass
class Observation:
    """What the policy sees at one step."""

    messages: list[dict[str, str]]  # chat messages rendered through the tokenizer's chat template
    anchor_state: Any  # environment state without history (GiGPO groups steps on it)
    admissible_actions: list[str] | None = None


@dataclass
class StepResult:
    observation: Observation | None
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Step:
    """One policy decision: the prompt it saw and the action tokens it produced."""

    prompt_text: str
    prompt_ids: list[int]
    action_text: str
    action_ids: list[int]
    truncated: bool  # hit max_new_tokens without an end-of-sequence token
    anchor_state: Any
    env_reward: float = 0.0
    reward: float = 0.0  # step-level reward used by step-aware estimators
    advantage: float = 0.0


@dataclass
class Episode:
    """A whole interaction, from reset to done (or the step cap)."""

    group_id: int
    index_in_group: int
    row: dict[str, Any]  # the task row it came from (question, ground truth, ...)
    steps: list[Step] = field(default_factory=list)
    score: float = 0.0  # episode-level scalar reward (weighted sum of reward functions)
    reward_parts: dict[str, float | None] = field(default_factory=dict)
    prediction: str | None = None
    correct: bool = False

    @property
    def prompt_id(self) -> str:
        return stable_id(self.steps[0].prompt_text) if self.steps else ""
