"""What the trainer announces to observers: a finished step, a saved checkpoint, the end of training.

Capabilities that act between steps (evaluation every ``eval_steps``, checkpoint rotation, hub
uploads) subclass :class:`TrainObserver` and are handed to ``Trainer(observers=[...])``; the
loop itself never learns about them. Each hook gets a :class:`~grouprl.train.run_state.StepView`
(the step, its records, the run state, what an evaluation needs), never the trainer. Every hook is a
no-op unless overridden.
"""

from __future__ import annotations

from pathlib import Path


class TrainObserver:
    def after_step(self, view, step: int, metrics: dict[str, float]) -> None:
        """After step ``step`` is logged (and checkpointed, when it is a save step)."""

    def after_checkpoint(self, view, path: Path) -> None:
        """After ``path`` (``checkpoint-<view.step>``) is written whole."""

    def after_train(self, view) -> None:
        """After the final checkpoint."""
