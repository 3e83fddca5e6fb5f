"""Checkpoints: model + tokenizer + optimizer + scheduler + RNG + step + data position, and the
scorer's learned state (learned rewards, mixer) when it has any.

``rng.pt`` holds every process's RNG state (``{"world_size": N, "states": [...]}``); the process
count is also in ``trainer_state.json``. Written by process 0 only; the RNG states are gathered
from all processes first (``train/parallel.py``), and on resume each process takes its own.

Written to a temporary dir and renamed into place, so a crash never leaves a torn checkpoint.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from grouprl.observe.disk import FULL, device_of, full_disk_errno
from grouprl.models.model_cache import CHECKSUMS, record_checksums
from grouprl.models.model_cache import damage as checksum_damage
from grouprl.train.parallel import ProcessInfo, ReshardError
from grouprl.train.resume_settings import apply_config_settings, schedule_of

STATE = "trainer_state.json"
LEARNED = "learned_rewards.pt"  # {"learned_rewards": scorer.state_dict()}
RNG_FILE = "rng.pt"


class CheckpointError(RuntimeError):
    """A checkpoint could not be written (full disk, quota...); the message says why for people."""


class DamagedCheckpoint(ValueError):
    """A checkpoint that cannot be resumed whole (a missing, truncated or corrupt file); names the file."""


def save_checkpoint(
    out_dir: str | Path,
    step: int,
    model,
    tokenizer,
    optimizer,
    scheduler,
    state: dict[str, Any],
    *,
    scorer=None,
    rng_states: list[dict[str, Any]] | None = None,
    model_state: dict[str, Any] | None = None,
    optimizer_state: dict[str, Any] | None = None,
) -> Path:
    """Write ``checkpoint-<step>`` atomically. On failure the partial temp dir is removed, earlier
    checkpoints are untouched, and ``CheckpointError`` names the cause (e.g. "No space left on
    device", which torch itself reports as "[enforce fail at inline_container.cc] unexpected pos").

    ``rng_states``: every process's (default: this process's alone); ``model_state`` and
    ``optimizer_state``: full state dicts gathered from sharded (FSDP) processes."""
    final = Path(out_dir) / f"checkpoint-{step}"
    tmp = Path(out_dir) / f".checkpoint-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        model.save_pretrained(tmp, state_dict=model_state)
        tokenizer.save_pretrained(tmp)
        torch.save(optimizer_state if optimizer_state is not None else optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        states = rng_states if rng_states is not None else [rng_state()]
        write_rng_states(tmp / RNG_FILE, states)
        schedule = schedule_of(scheduler)  # its shape is not in its state dict (train/resume_settings.py)
        (tmp / STATE).write_text(
            json.dumps({"step": step, "world_size": len(states), "schedule": schedule, **state}, indent=2)
        )
        if scorer is not None and (scorer.learned or scorer.mixer is not None):
            torch.save({"learned_rewards": scorer.state_dict()}, tmp / LEARNED)
        record_checksums(tmp)  # last: every file's size and sha256, checked before a resume
    except Exception as err:  # noqa: BLE001 - any writer (torch, safetensors, tokenizers) may fail
        why = _why(err, Path(out_dir))  # before the partial dir goes: removing it frees the space
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(
            f"could not write {final.name} in {out_dir}: {why}; the partial checkpoint was "
            "removed, earlier checkpoints are kept"
        ) from err
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return final


def _why(err: BaseException, out_dir: Path) -> str:
    """The cause in words: a full device named (whatever form the writer's error took), else the error."""
    code = full_disk_errno(err)
    if code is None:
        try:
            fs = os.statvfs(out_dir)  # torch's serializer says only "unexpected pos": ask the filesystem
            if fs.f_bavail * fs.f_frsize < 1 << 20 or (fs.f_files and fs.f_favail == 0):
                code = errno.ENOSPC
        except OSError:
            pass
    if code is not None:
        return f"{FULL[code]} ({device_of(out_dir)})"
    return f"{type(err).__name__}: {err}"


REQUIRED = (STATE, "optimizer.pt", "scheduler.pt", RNG_FILE)
WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "adapter_model.safetensors",
    "pytorch_model.bin",
    "adapter_model.bin",
)


def check_checkpoint(ckpt: str | Path) -> dict[str, Any]:
    """Every file of a checkpoint read through (nothing loaded into a model): its state, or
    ``DamagedCheckpoint`` naming the first file that is missing, truncated or corrupt.

    JSON files must parse; torch's ``.pt``/``.bin`` files are zip archives whose every member must
    match its CRC; a ``.safetensors`` file's header must parse and its tensors fill the file exactly; and
    every file must have the size and sha256 recorded in ``checksums.json`` when it was written."""
    ckpt = Path(ckpt)
    if not ckpt.is_dir():
        raise DamagedCheckpoint(f"{ckpt} is not a directory")
    missing = [name for name in REQUIRED if not (ckpt / name).is_file()]
    if not any((ckpt / name).is_file() for name in WEIGHTS):
        missing.append("model weights (model.safetensors or adapter_model.safetensors)")
    if missing:
        raise DamagedCheckpoint(f"{ckpt} has no {', '.join(missing)}")
    index = ckpt / "model.safetensors.index.json"
    if index.is_file():  # sharded weights: every shard the index names must be there (and whole, below)
        try:
            shards = sorted(set(json.loads(index.read_bytes())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise DamagedCheckpoint(
                f"{index.relative_to(ckpt.parent)} is damaged ({type(err).__name__}: {err})"
            ) from None
        absent = [name for name in shards if not (ckpt / name).is_file()]
        if absent:
            raise DamagedCheckpoint(f"{ckpt} has no {', '.join(absent)} (named by model.safetensors.index.json)")
    for path in sorted(p for p in ckpt.rglob("*") if p.is_file()):
        why = _damage(path)
        if why:
            raise DamagedCheckpoint(f"{path.relative_to(ckpt.parent)} is damaged ({why})")
    # A flipped byte where no format checks it (a zip's alignment padding, a float inside a tensor) changes the
    # file's sha256; checkpoints written before grouprl recorded checksums are read as above only.
    if (ckpt / CHECKSUMS).is_file() and (why := checksum_damage(ckpt)):
        raise DamagedCheckpoint(f"{ckpt.name}/{why}")
    state = json.loads((ckpt / STATE).read_text())
    for key in ("step", "data_position"):
        if not isinstance(state, dict) or type(state.get(key)) is not int or state[key] < 0:
            raise DamagedCheckpoint(
                f"{ckpt / STATE} has no whole-number '{key}' (found "
                f"{state.get(key) if isinstance(state, dict) else state!r})"
            )
    return state


def _damage(path: Path) -> str | None:
    """Why ``path`` cannot be read whole, or None."""
    suffix = path.suffix
    try:
        if suffix == ".json":
            json.loads(path.read_bytes())
        elif suffix in (".pt", ".bin"):
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()
            if bad:
                return f"member {bad} fails its CRC check"
        elif suffix == ".safetensors":
            return _safetensors_damage(path)
    except (ValueError, zipfile.BadZipFile, OSError, EOFError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def _safetensors_damage(path: Path) -> str | None:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return f"{size} bytes, shorter than a safetensors header"
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            return f"header of {n} bytes in a file of {size}: truncated"
        header = json.loads(fh.read(n))
    ends = [entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"]
    expected = 8 + n + max(ends, default=0)
    if expected != size:
        return (
            f"{size} bytes where its tensors need {expected}: truncated"
            if size < expected
            else f"{size - expected} bytes past its last tensor"
        )
    return None


def read_checkpoint_state(ckpt: str | Path) -> dict[str, Any]:
    ckpt = Path(ckpt)
    if not (ckpt / STATE).is_file():
        raise FileNotFoundError(f"--resume_from_checkpoint: {ckpt} has no {STATE}; not a grouprl checkpoint")
    return json.loads((ckpt / STATE).read_text())


def load_checkpoint(ckpt: str | Path, optimizer, scheduler, scorer=None) -> dict[str, Any]:
    """Optimizer, scheduler and learned state; the RNG states are the caller's to restore
    (``read_rng_states`` / ``restore_rng_states``: each process takes its own)."""
    ckpt = Path(ckpt)
    state = read_checkpoint_state(ckpt)
    if scorer is not None and (scorer.learned or scorer.mixer is not None):
        if not (ckpt / LEARNED).is_file():
            raise FileNotFoundError(
                f"--resume_from_checkpoint: {ckpt} has no {LEARNED}, but the run has learned "
                "rewards whose state it needs"
            )
        scorer.load_state_dict(torch.load(ckpt / LEARNED, weights_only=False)["learned_rewards"])
    optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=False))
    scheduler.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=False))
    return state


def load_training_state(ckpt: str | Path, learner, scorer, parallel) -> dict[str, Any]:
    """Optimizer, scheduler and learned state from a checkpoint into the learner; under FSDP each
    process takes its shard of the full optimizer state (collective). The run's config then sets the
    learning rate, weight decay, betas and schedule (``train/resume_settings.py``)."""
    if not parallel.sharded:
        state = load_checkpoint(ckpt, learner.optimizer, learner.scheduler, scorer)
    else:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        state = load_checkpoint(ckpt, _NoOptimizer(), learner.scheduler, scorer)
        full = torch.load(Path(ckpt) / "optimizer.pt", weights_only=False)
        opts = StateDictOptions(full_state_dict=True)
        set_optimizer_state_dict(learner.model, learner.optimizer, full, options=opts)
    # the config's lr, weight decay, betas and schedule win over the checkpoint's; each change is logged
    apply_config_settings(learner.optimizer, learner.scheduler, learner.cfg.train, state.get("schedule", {}), str(ckpt))
    return state


class _NoOptimizer:
    """Stands in for the optimizer when its (full) state is loaded separately, shard by shard."""

    def load_state_dict(self, state: dict) -> None:
        pass


# --- RNG state per process -----------------------------------------------------------------


def rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_process(seed: int, step: int, rank: int) -> None:
    """A fresh, reproducible stream for (seed, step, rank): used when resuming with another count."""
    mixed = (seed * 1_000_003 + step * 7919 + rank) % (2**31 - 1)
    random.seed(mixed)
    np.random.seed(mixed)
    torch.manual_seed(mixed)


def write_rng_states(path: str | Path, states: list[dict[str, Any]]) -> None:
    """Every process's RNG state (gathered), as ``{"world_size", "states"}``."""
    torch.save({"world_size": len(states), "states": states}, Path(path))


def read_rng_states(path: str | Path) -> list[dict[str, Any]]:
    """The per-process states of a checkpoint; a single-process checkpoint of the older format
    (one bare state) reads as one process."""
    saved = torch.load(Path(path), weights_only=False)
    return saved["states"] if "states" in saved else [saved]


def check_world_size(saved: int, info: ProcessInfo, reshard: bool, where: str = "checkpoint") -> None:
    """Refuse to resume a checkpoint of ``saved`` processes with another count, unless ``reshard``."""
    if saved != info.world_size and not reshard:
        raise ReshardError(
            f"{where} was written by {saved} process(es), this run has {info.world_size}: the sampling "
            f"RNG streams of each process cannot be split or merged exactly. Relaunch with {saved} "
            f"process(es), or set reshard_on_resume: true to continue the same data order with fresh "
            f"per-process streams seeded from (seed, step, rank)"
        )


def restore_rng_states(
    states: list[dict[str, Any]], info: ProcessInfo, reshard: bool, seed: int, step: int, where: str = "checkpoint"
) -> str:
    """Resume each process's RNG stream. Same process count: exact. Another count: the data
    position still continues exactly (it is global), but per-process sampling streams cannot be
    split or merged, so refuse unless ``reshard`` asks for fresh (seed, step, rank) streams."""
    if len(states) == info.world_size:
        set_rng_state(states[info.rank])
        return "restored"
    check_world_size(len(states), info, reshard, where)
    seed_process(seed, step, info.rank)
    return "reseeded"
