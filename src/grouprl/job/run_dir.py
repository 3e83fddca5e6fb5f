"""The run folder before a run starts: refuse to mix two runs, and cut a resumed run's logs back.

* A fresh run into an ``output_dir`` that already holds a run refuses (its logs would be appended
  to the old run's), unless ``overwrite_output_dir`` (the old run's files are removed) or
  ``resume_from_checkpoint`` (``last`` picks the newest ``checkpoint-N`` there, as open-r1 does).
* A resumed run replays the steps after its checkpoint, so ``metrics.jsonl`` and
  ``rollouts/rollouts.jsonl`` are cut back to the checkpoint's step and later
  ``trajectories/step_N.jsonl`` files are removed; the replayed steps are then logged once.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from grouprl.config import Config, ConfigError
from grouprl.observe.jsonl import truncate_to_step
from grouprl.train.checkpoint import read_checkpoint_state

log = logging.getLogger(__name__)

# What a run writes into its output_dir (the only things overwrite_output_dir removes).
RUN_FILES = ("config.json", "metrics.jsonl", "summary.json", "reward_curve.png", "rollouts", "trajectories", "eval",
             "wandb", "sft_model")
_CHECKPOINT = re.compile(r"^\.?checkpoint-(\d+)(\.tmp)?$")


def checkpoints(out: Path) -> list[Path]:
    """``checkpoint-N`` dirs in ``out``, oldest first."""
    found = [(int(m.group(1)), p) for p in out.glob("checkpoint-*")
             if (m := _CHECKPOINT.match(p.name)) and not m.group(2) and p.is_dir()]
    return [p for _, p in sorted(found)]


def run_files(out: Path) -> list[Path]:
    return [p for p in out.iterdir() if p.name in RUN_FILES or _CHECKPOINT.match(p.name)] if out.is_dir() else []


def prepare_run_dir(cfg: Config) -> str | None:
    """Check (and for resume/overwrite, prepare) ``output_dir``; the checkpoint to resume, or None."""
    train = cfg.train
    out = Path(train.output_dir)
    resume = train.resume_from_checkpoint
    if resume == "last":
        found = checkpoints(out)
        if not found:
            raise ConfigError(f"config key 'resume_from_checkpoint': 'last', but {out} holds no checkpoint-N; "
                              "expected a finished or checkpointed run there")
        resume = str(found[-1])
    if resume:
        step = int(read_checkpoint_state(resume)["step"])
        cut_logs(out, step)
        return resume
    existing = run_files(out)
    if existing and not train.overwrite_output_dir:
        names = ", ".join(sorted(p.name for p in existing)[:5])
        raise ConfigError(f"config key 'output_dir': {out} already holds a run ({names}); expected an empty dir, "
                          "or --overwrite_output_dir true to start afresh, or --resume_from_checkpoint last")
    for path in existing:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return None


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
