"""A few of the step's completions in the terminal every N steps, so a newcomer sees the behaviour
change while the bar moves (TRL's ``num_completions_to_print``): prompt, completion, reward.

The samples are drawn with their own seeded generator, never the run's RNG streams, so printing
them cannot change what the run learns.
"""

from __future__ import annotations

import random

from rich.table import Table

from grouprl.job.observer import TrainObserver


def _one_line(text: str, width: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def completion_table(step: int, episodes, verdicts, count: int, seed: int, width: int = 70) -> Table:
    """``count`` episodes of the step (a seeded choice), each as prompt | completion | reward | correct."""
    chosen = random.Random(seed * 1_000_003 + step).sample(range(len(episodes)), min(count, len(episodes)))
    table = Table(title=f"step {step}: {len(chosen)} of {len(episodes)} completions", title_justify="left")
    for column in ("prompt", "completion", "reward", "correct"):
        table.add_column(column, overflow="fold")
    for index in sorted(chosen):
        episode = episodes[index]
        last = episode.steps[-1]
        prompt = episode.steps[0].observation or str(episode.row.get("question", ""))
        table.add_row(
            _one_line(prompt, width // 2),
            _one_line(last.action_text, width),
            f"{verdicts[index].score:.2f}",
            "yes" if verdicts[index].correct else "no",
        )
    return table


class CompletionSamples(TrainObserver):
    """Prints ``count`` completions of step 1 and of every ``every``-th step."""

    def __init__(self, console, count: int, every: int, seed: int):
        self.console, self.count, self.every, self.seed = console, count, every, seed

    def after_step(self, view, step: int, metrics: dict[str, float]) -> None:
        record = view.record
        if record is None or self.count <= 0 or not (step == 1 or step % self.every == 0):
            return
        self.console.print(completion_table(step, record.episodes, record.scores.verdicts, self.count, self.seed))
