"""The run folder: one run at a time, checked whole before anything in it changes.

* :meth:`RunFolder.lock` takes ``output_dir`` with an exclusive ``flock`` before the run writes
  anything there, held for the run's life (the kernel releases it when the process ends, crash
  included): a second run into the same folder refuses in one line instead of mixing its logs.
* :meth:`RunFolder.plan` checks and changes nothing. A fresh run into a folder that holds a run
  refuses, unless ``overwrite_output_dir`` (the old run's files go, but never a path the run reads:
  the model, a checkpoint, the data, a reward file) or ``resume_from_checkpoint`` (``last``: the
  newest checkpoint that is whole; a damaged one is skipped and named). A checkpoint to resume is
  read through completely (``train/checkpoint.py:check_checkpoint``) before any log is touched.
* :meth:`RunFolder.apply` runs after every other check of the run: it removes the old run's files,
  or cuts a resumed run's logs back to its checkpoint's step (the replayed steps are logged once).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from grouprl.config import Config, ConfigError
from grouprl.observe.jsonl import truncate_to_step
from grouprl.train.checkpoint import DamagedCheckpoint, check_checkpoint
from grouprl.user_code import code_ref

log = logging.getLogger(__name__)

LOCK = ".grouprl.lock"
# What a run writes into its output_dir (the only things overwrite_output_dir removes).
RUN_FILES = (
    "config.json",
    "metrics.jsonl",
    "summary.json",
    "reward_curve.png",
    "rollouts",
    "trajectories",
    "eval",
    "wandb",
    "tensorboard",
    "sft_model",
    "tiny_model",
    "best_checkpoint.json",
)
_CHECKPOINT = re.compile(r"^\.?checkpoint-(\d+)(\.tmp)?$")


def checkpoints(out: Path) -> list[Path]:
    """``checkpoint-N`` dirs in ``out``, oldest first."""
    found = [
        (int(m.group(1)), p)
        for p in out.glob("checkpoint-*")
        if (m := _CHECKPOINT.match(p.name)) and not m.group(2) and p.is_dir()
    ]
    return [p for _, p in sorted(found)]


def run_files(out: Path) -> list[Path]:
    return [p for p in out.iterdir() if p.name in RUN_FILES or _CHECKPOINT.match(p.name)] if out.is_dir() else []


@dataclass
class RunPlan:
    """What :meth:`RunFolder.apply` will do: resume ``resume`` (cutting logs to ``step``) or delete."""

    resume: str | None = None
    step: int = 0
    delete: list[Path] = field(default_factory=list)


class RunFolder:
    def __init__(self, out: str | Path):
        self.out = Path(out)
        self._fd: int | None = None

    def lock(self) -> None:
        """Create the folder and hold its lock file; refuses when another run holds it."""
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise ConfigError(
                f"config key 'output_dir': cannot write in {self.out} ({err.strerror}); "
                "expected a folder this user can create and write"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise ConfigError(
                f"config key 'output_dir': {self.out} is in use by another grouprl run ({holder}); "
                "expected a folder no running run writes to: wait for that run to end, or choose "
                "another output_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def plan(self, cfg: Config) -> RunPlan:
        """Check the folder against the config; changes nothing."""
        train = cfg.train
        resume = train.resume_from_checkpoint
        if resume == "last":
            return self._plan_last()
        if resume:
            return self._plan_resume(Path(resume))
        existing = run_files(self.out)
        if existing and not train.overwrite_output_dir:
            names = ", ".join(sorted(p.name for p in existing)[:5])
            raise ConfigError(
                f"config key 'output_dir': {self.out} already holds a run ({names}); expected an empty "
                "dir, or --overwrite_output_dir true to start afresh, or --resume_from_checkpoint last"
            )
        for path in existing:
            for key, read in paths_read(cfg):
                if _overlap(path, read, self.out):
                    raise ConfigError(
                        f"config key 'overwrite_output_dir': it would delete {path}, but '{key}' reads {read}; "
                        f"expected the run's inputs outside the old run's files: copy it elsewhere first, or choose "
                        f"another output_dir (nothing was deleted)"
                    )
        return RunPlan(delete=existing)

    def _plan_resume(self, ckpt: Path) -> RunPlan:
        if ckpt.is_dir() and not any((ckpt / name).is_file() for name in ("trainer_state.json", "optimizer.pt")):
            raise ConfigError(f"--resume_from_checkpoint: {ckpt} has no trainer_state.json; not a grouprl checkpoint")
        try:
            state = check_checkpoint(ckpt)
        except DamagedCheckpoint as err:
            whole = [p.name for p in checkpoints(ckpt.parent) if p != ckpt and _whole(p)]
            hint = (
                f"resume from a whole one ({whole[-1]}) or --resume_from_checkpoint last"
                if whole
                else "no other whole checkpoint is there"
            )
            raise ConfigError(
                f"--resume_from_checkpoint {ckpt}: {err}; expected a whole checkpoint: {hint} (no log was changed)"
            ) from None
        return RunPlan(resume=str(ckpt), step=state["step"])

    def _plan_last(self) -> RunPlan:
        found = checkpoints(self.out)
        if not found:
            raise ConfigError(
                f"config key 'resume_from_checkpoint': 'last', but {self.out} holds no checkpoint-N; "
                "expected a finished or checkpointed run there"
            )
        skipped = []
        for ckpt in reversed(found):
            try:
                state = check_checkpoint(ckpt)
            except DamagedCheckpoint as err:
                skipped.append(str(err))
                continue
            for why in skipped:
                log.warning("resume_from_checkpoint last: skipped a checkpoint that is not whole: %s", why)
            return RunPlan(resume=str(ckpt), step=state["step"])
        raise ConfigError(
            f"config key 'resume_from_checkpoint': 'last', but no checkpoint in {self.out} is whole "
            f"({'; '.join(skipped)}); expected at least one (no log was changed)"
        )

    def apply(self, plan: RunPlan) -> None:
        """Make the folder what the plan says (call after every other check of the run)."""
        if plan.resume:
            cut_logs(self.out, plan.step)
            return
        for path in plan.delete:
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def _whole(ckpt: Path) -> bool:
    try:
        check_checkpoint(ckpt)
        return True
    except DamagedCheckpoint:
        return False


def paths_read(cfg: Config) -> Iterator[tuple[str, Path]]:
    """(config key, existing path) for every value of the config that names a file or folder the run reads:
    the model, the data, a chat template, a reward or estimator file (``file.py:function``)."""

    def walk(key: str, value: Any) -> Iterator[tuple[str, Path]]:
        if isinstance(value, dict):
            for k, v in value.items():
                yield from walk(str(k), v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                yield from walk(key, v)
        elif isinstance(value, str) and value and key != "output_dir" and "\n" not in value and len(value) < 4096:
            ref = code_ref(value)
            for candidate in {value, ref.where if ref else value}:
                try:
                    path = Path(candidate).expanduser()
                    if path.exists():
                        yield key, path.resolve()
                except (OSError, ValueError):
                    continue

    yield from walk("", cfg.model_dump())


def _overlap(deleted: Path, read: Path, out: Path) -> bool:
    """Deleting ``deleted`` would take (part of) ``read``: it is inside it, or ``read`` is a folder
    inside the run folder (e.g. the output_dir itself used as the model) that holds it."""
    deleted, out = deleted.resolve(), out.resolve()
    return (
        read == deleted
        or deleted in read.parents
        or (read.is_dir() and (read == out or out in read.parents) and read in deleted.parents)
    )


def cut_logs(out: Path, step: int) -> None:
    """Drop every record of the steps after ``step`` (they are run and logged again)."""
    dropped = truncate_to_step(out / "metrics.jsonl", step)
    dropped += truncate_to_step(out / "rollouts" / "rollouts.jsonl", step)
    for path in (out / "trajectories").glob("step_*.jsonl"):
        digits = path.stem.removeprefix("step_")
        if digits.isdigit() and int(digits) > step:
            path.unlink()
            dropped += 1
    if dropped:
        log.info("resume from step %d: removed %d logged record(s)/file(s) of later steps", step, dropped)
