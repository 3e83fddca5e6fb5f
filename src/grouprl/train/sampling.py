"""Which training prompts a step draws: the seeded row order, and the optional difficulty curriculum.

The curriculum (``objective.curriculum``, off by default) skips, for ``skip_steps`` steps, every
prompt whose last group was solved K/K or failed 0/K by the task's judge: such a group has no
variance and so no policy gradient under a group-relative advantage, and the skipped draw goes to
a prompt that still teaches something (the "pool" of Polaris / prime-rl's online difficulty
filtering, applied before generation instead of after). At most ``max_skipped_fraction`` of the
prompts are skipped at once, so a solved data set does not run dry. Its state (which prompts are
skipped until when) is in the checkpoint; the row order itself is the plain sampler's.
"""

from __future__ import annotations

import random
from typing import Any

from grouprl.records import Episode, Verdict


class RowSampler:
    """Rows in a seeded order, reshuffled every epoch; ``position`` is the only state."""

    def __init__(self, rows: list[dict[str, Any]], seed: int, position: int = 0):
        self.rows, self.seed, self.position = rows, seed, position
        self._epoch, self._cached = -1, list[int]()

    def _order(self, epoch: int) -> list[int]:
        if epoch != self._epoch:  # one shuffle per epoch, derived from (seed, epoch) alone
            self._cached = list(range(len(self.rows)))
            random.Random(self.seed * 100003 + epoch).shuffle(self._cached)
            self._epoch = epoch
        return self._cached

    def next_index(self) -> int:
        epoch, offset = divmod(self.position, len(self.rows))
        self.position += 1
        return self._order(epoch)[offset]

    def next(self, n: int) -> list[dict[str, Any]]:
        return [self.rows[self.next_index()] for _ in range(n)]

    # The curriculum's hooks; the plain order has nothing to observe, report or keep beyond ``position``.
    def start_step(self, step: int) -> None:
        """Before a step's first draw."""

    def observe(self, episodes: list[Episode], verdicts: list[Verdict], step: int) -> None:
        """After each round of a step is scored (every process's episodes)."""

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any] | None:
        """What a checkpoint keeps beyond ``position`` (None: nothing)."""
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""


class CurriculumSampler(RowSampler):
    """The seeded order, minus the prompts recently solved K/K or 0/K (see the module docstring)."""

    def __init__(
        self, rows: list[dict[str, Any]], seed: int, skip_steps: int, max_skipped_fraction: float, position: int = 0
    ):
        super().__init__(rows, seed, position)
        self.skip_steps, self.max_skipped = skip_steps, max(0, int(max_skipped_fraction * len(rows)))
        self.skip_until: dict[int, int] = {}  # row index -> first step at which it is drawn again
        self.now = 0  # the step being generated
        self.skipped_draws = 0  # draws passed over so far (a metric)
        self.last_indices: list[int] = []  # the rows of the last draw, in order (a round's group g is [g])

    def skipped_now(self) -> int:
        return sum(until > self.now for until in self.skip_until.values())

    def next(self, n: int) -> list[dict[str, Any]]:
        out: list[int] = []
        while len(out) < n:
            i = self.next_index()
            if self.skip_until.get(i, 0) > self.now:
                self.skipped_draws += 1
                continue
            out.append(i)
        self.last_indices = out
        return [self.rows[i] for i in out]

    def observe(self, episodes: list[Episode], verdicts: list[Verdict], step: int) -> None:
        """After a round is scored (every process's episodes; the round's groups numbered from its first,
        in the order drawn): skip its prompts solved by every or by no member of their group, from the
        next step on."""
        self.now = step
        first = min((ep.group_id for ep in episodes), default=0)
        outcomes: dict[int, set[bool]] = {}
        for ep, verdict in zip(episodes, verdicts):
            outcomes.setdefault(ep.group_id - first, set()).add(bool(verdict.correct))
        for group, seen in sorted(outcomes.items()):
            if len(seen) == 1 and group < len(self.last_indices) and self.skipped_now() < self.max_skipped:
                self.skip_until[self.last_indices[group]] = step + 1 + self.skip_steps

    def start_step(self, step: int) -> None:
        self.now = step
        self.skip_until = {i: s for i, s in self.skip_until.items() if s > step}  # expired entries go

    def metrics(self) -> dict[str, float]:
        return {
            "curriculum/skipped_prompts": float(self.skipped_now()),
            "curriculum/skipped_draws": float(self.skipped_draws),
        }

    def state_dict(self) -> dict[str, Any] | None:
        return {
            "skip_until": {str(i): s for i, s in self.skip_until.items()},
            "now": self.now,
            "skipped_draws": self.skipped_draws,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.skip_until = {int(i): int(s) for i, s in state["skip_until"].items()}
        self.now, self.skipped_draws = int(state["now"]), int(state["skipped_draws"])
