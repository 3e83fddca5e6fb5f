"""What happens after a checkpoint is saved: rotation (``save_total_limit``) and hub pushes.

Both are trainer observers (``after_checkpoint(trainer, path)``, ``after_train(trainer)``);
the trainer only announces the saves.

Rotation keeps the newest ``save_total_limit`` checkpoints, never deletes the best one
(``best_checkpoint.json``, see ``periodic_eval.py``) nor the last, and never one whose hub
upload is still running.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable, Set as AbstractSet
from concurrent.futures import Future
from pathlib import Path

from grouprl.job.observer import TrainObserver
from grouprl.job.periodic_eval import best_step

log = logging.getLogger(__name__)
_CKPT = re.compile(r"^checkpoint-(\d+)$")


def checkpoints(out_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every finished checkpoint, oldest first."""
    found = []
    for path in Path(out_dir).iterdir():
        m = _CKPT.match(path.name)
        if m and path.is_dir():
            found.append((int(m[1]), path))
    return sorted(found)


def rotate(out_dir: str | Path, limit: int, keep: AbstractSet[int] = frozenset()) -> list[Path]:
    """Delete all but the newest ``limit`` checkpoints, sparing the steps in ``keep`` and the best."""
    found = checkpoints(out_dir)
    spared = {step for step, _ in found[-limit:]} | set(keep)
    best = best_step(out_dir)
    if best is not None:
        spared.add(best)
    deleted = []
    for step, path in found:
        if step not in spared:
            shutil.rmtree(path)
            deleted.append(path)
    if deleted:
        log.info("save_total_limit=%d: deleted %s", limit, ", ".join(p.name for p in deleted))
    return deleted


class CheckpointRotation(TrainObserver):
    def __init__(self, limit: int, busy: Callable[[], set[int]] | None = None):
        self.limit = limit
        self.busy = busy or set  # steps whose upload is running

    def after_checkpoint(self, view, path: Path) -> None:
        rotate(view.out, self.limit, set(self.busy()))

    def after_train(self, view) -> None:
        # A checkpoint spared above because its upload was still running is due now: the hub
        # observer runs before this one and has waited for every upload.
        rotate(view.out, self.limit, set(self.busy()))


class HubPushObserver(TrainObserver):
    """Each checkpoint to its step branch (``push_to_hub_revision``), the final model to main
    (``push_to_hub``), in the background; the run waits for the uploads at its end."""

    def __init__(self, pusher, checkpoints_to_branches: bool, final_to_main: bool):
        self.pusher, self.to_branches, self.to_main = pusher, checkpoints_to_branches, final_to_main
        self._pending: dict[int, Future] = {}

    def busy(self) -> set[int]:
        """Steps rotation must spare: uploads still running, and failed ones (the local copy is the only one)."""
        return {step for step, future in self._pending.items() if not future.done() or future.exception() is not None}

    def after_checkpoint(self, view, path: Path) -> None:
        if self.to_branches:
            self._pending[view.step] = self.pusher.push_checkpoint(path, view.step)

    def after_train(self, view) -> None:
        if self.to_main:
            self.pusher.push_final(view.out / f"checkpoint-{view.step}")
        try:
            pushed = self.pusher.wait()
        finally:
            self.pusher.close()
        view.run_state.hub_revisions = pushed
