"""SIGTERM (what SLURM sends before it preempts or times out a job): save, then stop.

A handler installed for the run's life sets a flag; the first observer of every step reads it after
the step in progress has finished, saves that step's checkpoint and stops the run with
:class:`Preempted` (exit code 143, as a process ended by SIGTERM). A step is never cut in half (its
update is all or nothing), so give SLURM's warning more than one step's time
(``#SBATCH --signal=TERM@120``). Before the first step of this process finishes, and after the final
checkpoint, there is nothing new to save: the run stops at once. A second SIGTERM stops it at once too, unless
it comes within ``REPEAT_WINDOW_S`` of the first: that is the same request delivered twice. SLURM signals every
process of a job step (``--signal``, ``scancel --signal``, the time limit) and a launcher (``torchrun``,
``accelerate launch``) forwards its own copy to each rank a few milliseconds later; taken as a second request it
stopped every rank mid-step with nothing saved. A launcher also kills its ranks ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``
seconds (default 30) after forwarding: set it above a step's time plus a save.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

from grouprl.job.observer import TrainObserver

log = logging.getLogger(__name__)

REPEAT_WINDOW_S = 5.0  # a SIGTERM this soon after the first is the same one (SLURM's and the launcher's copies)


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
        self._first_at: float | None = None  # when the first SIGTERM came (monotonic seconds)

    def install(self) -> Preemption:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _on_sigterm(self, signum, frame) -> None:
        now = time.monotonic()
        if self._first_at is not None and now - self._first_at < REPEAT_WINDOW_S:
            log.info("SIGTERM again %.2fs after the first: the same request, delivered twice", now - self._first_at)
            return
        if self._first_at is None:
            self._first_at = now
        if self.requested or not self.step_finished or self.trained:
            saved = "the final checkpoint is saved" if self.trained else "nothing new to save"
            if self.requested and not self.trained:
                saved = "a second SIGTERM before the step in progress finished: nothing saved"
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
