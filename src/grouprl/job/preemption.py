"""SIGTERM (what SLURM sends before it preempts or times out a job): save, then stop.

A handler installed for the run's life sets a flag; the first observer of every step reads it after
the step in progress has finished, saves that step's checkpoint and stops the run with
:class:`Preempted` (exit code 143, as a process ended by SIGTERM). A step is never cut in half (its
update is all or nothing), so give SLURM's warning more than one step's time
(``#SBATCH --signal=TERM@120``). Before the first step of this process finishes, and after the final
checkpoint, there is nothing new to save: the run stops at once. A second SIGTERM stops it at once too.
"""

from __future__ import annotations

import logging
import signal
import threading

from grouprl.job.observer import TrainObserver

log = logging.getLogger(__name__)


class Preempted(Exception):
    """The run stopped on SIGTERM (its message says what was saved)."""

    exit_code = 143  # 128 + SIGTERM, what a shell reports for a process SIGTERM ended


class Preemption(TrainObserver):
    """Install with :meth:`install` (main thread only), put first among the trainer's observers."""

    def __init__(self):
        self.requested = False
        self.step_finished = False  # a step of this process finished: its state is worth a checkpoint
        self.trained = False  # the final checkpoint is saved
        self._previous = None

    def install(self) -> Preemption:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _on_sigterm(self, signum, frame) -> None:
        if self.requested or not self.step_finished or self.trained:
            saved = "the final checkpoint is saved" if self.trained else "nothing new to save"
            raise Preempted(f"stopped by SIGTERM ({saved})")
        self.requested = True
        log.warning("SIGTERM: the step in progress finishes, then its checkpoint is saved and the run stops")

    def after_step(self, view, step: int, metrics: dict[str, float]) -> None:
        from grouprl.train.parallel import broadcast_object

        self.step_finished = True
        if broadcast_object(self.requested):  # process 0's flag: every process saves the same step
            path = view.checkpoint()
            raise Preempted(
                f"stopped by SIGTERM after step {step}; saved {path}; resume with --resume_from_checkpoint {path}"
            )

    def after_train(self, view) -> None:
        self.trained = True
