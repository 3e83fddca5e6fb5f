"""Single-turn tasks: a list of rows, each turned into a one-step episode."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grouprl.records import Observation, StepResult, stable_id


@dataclass
class SingleTurnTask:
    """Rows with ``question``/``ground_truth`` plus how to prompt and score them.

    ``gold_completion`` (optional per row) is the reference solution used for SFT warm-up.
    """

    name: str
    train_rows: list[dict[str, Any]]
    eval_rows: list[dict[str, Any]]
    system_prompt: str | None
    reward_names: list[str]
    correct_reward: str  # the reward whose value 1.0 means "correct" (accuracy)
    reward_weights: list[float] = field(default_factory=list)
    reward_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> bound keyword options

    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return msgs + [{"role": "user", "content": row["question"]}]


class SingleTurnEnv:
    """A task row as an environment: one observation, one action, done.

    This is what makes single-turn training an episode of one step, so it runs through
    the same episode runner, advantage registry and loss as multi-step agents.
    """

    def __init__(self, task: SingleTurnTask, row: dict[str, Any]):
        self.task, self.row = task, row

    def reset(self, seed: int | None = None) -> Observation:
        msgs = self.task.messages(self.row)
        return Observation(messages=msgs, anchor_state=stable_id(repr(msgs)))

    def step(self, action: str) -> StepResult:
        # Single-turn rewards come from the reward functions over the whole episode.
        return StepResult(observation=None, reward=0.0, done=True)
