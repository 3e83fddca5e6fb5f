"""What the trainer announces to observers: a finished step, a saved checkpoint, the end of training.

Capabilities that act between steps (the rollout and trajectory logs, evaluation every ``eval_steps``,
the completions printed, checkpoint rotation, hub uploads) subclass :class:`TrainObserver` and are
handed to ``Trainer(observers=[...])``; the loop itself never learns about them. Each hook gets a
:class:`~grouprl.train.run_state.StepView` (the step, its records, the run state, the out folder,
``is_main``, ``checkpoint()`` and ``evaluate(...)``), never the trainer, the task, the scorer or the
backend. Every hook is a no-op unless overridden.
"""

from __future__ import annotations

from pathlib import Path


class TrainObserver:
    def after_step(self, view, step: int, metrics: dict[str, float]) -> None:
        """After step ``step`` is logged, before its checkpoint when it is a save step (so an evaluation
        here that finds a new best is in that checkpoint's run state)."""

    def after_checkpoint(self, view, path: Path) -> None:
        """After ``path`` (``checkpoint-<view.step>``) is written whole."""

    def after_train(self, view) -> None:
        """After the final checkpoint."""
