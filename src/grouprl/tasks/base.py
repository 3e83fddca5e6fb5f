"""Single-turn tasks: a list of rows, each turned into a one-step episode."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

from grouprl.records import Observation, StepResult, stable_id
from grouprl.tasks.interface import Environment, Task


@dataclass
class SingleTurnTask(Task):
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
    reward_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> keyword arguments bound to it
    corpus_extra: str = ""  # characters the tiny tokenizer needs beyond the rows' (arithmetic: every digit)
    # The answer a completion gives, as logged and shown beside the ground truth (None: not parsed).
    predict: Callable[[str], Any] | None = None

    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return msgs + [{"role": "user", "content": row["question"]}]

    # The parts of the task protocol (see tasks/env_task.py) a single-turn task fills trivially.
    multi_step = False

    def env_factory(self, row: dict[str, Any]):
        """A picklable zero-argument builder of the row's one-step environment."""
        return functools.partial(SingleTurnEnv, self.messages(row))

    def seed_of(self, row: dict[str, Any]) -> int | None:
        return None

    def eval_metrics(self, episodes) -> dict[str, float]:
        """``format_rate``: the share of completions whose answer parses (``predict``; GSM8K: a last line
        ``Final: <number>``, what its reward's 0.1 pays for), beside accuracy; {} for a task with no parser."""
        if self.predict is None or not episodes:
            return {}
        parsed = sum(self.predict(ep.steps[-1].action_text) is not None for ep in episodes if ep.steps)
        return {"format_rate": parsed / len(episodes)}

    def tokenizer_corpus(self) -> str:
        """Every character the task can show or expect: its rows, its system prompt, ``corpus_extra``."""
        chars = {c for r in self.train_rows + self.eval_rows for c in r["question"] + r["gold_completion"]}
        chars |= set(self.corpus_extra) | set(self.system_prompt or "")
        return "".join(sorted(chars))


class SingleTurnEnv(Environment):
    """A task row as an environment: one observation, one action, done.

    This is what makes single-turn training an episode of one step, so it runs through
    the same episode runner, advantage registry and loss as multi-step agents. It renders
    its own chat (system message + question), so no history window applies.
    """

    def __init__(self, messages: list[dict[str, str]]):
        self.messages = messages

    def reset(self, seed: int | None = None) -> Observation:
        return Observation(
            text=self.messages[-1]["content"], anchor_state=stable_id(repr(self.messages)), messages=self.messages
        )

    def step(self, action: str) -> StepResult:
        # Single-turn rewards come from the reward functions over the whole episode.
        return StepResult(observation=None, reward=0.0, done=True)
