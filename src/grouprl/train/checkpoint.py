"""Checkpoints: model + tokenizer + optimizer + scheduler + RNG + step + data position, and the
scorer's learned state (learned rewards, mixer) when it has any.

``rng.pt`` holds every process's RNG state (``{"world_size": N, "states": [...]}``, see
``train/distributed.py``); the process count is also in ``trainer_state.json``. Written by
process 0 only; the RNG states are gathered from all processes first.

Written to a temporary dir and renamed into place, so a crash never leaves a torn checkpoint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from grouprl.train.distributed import RNG_FILE, rng_state

STATE = "trainer_state.json"
LEARNED = "learned_rewards.pt"  # {"learned_rewards": scorer.state_dict()}


def save_checkpoint(out_dir: str | Path, step: int, model, tokenizer, optimizer, scheduler,
                    state: dict[str, Any], scorer=None, rng_states: list[dict[str, Any]] | None = None,
                    model_state: dict[str, Any] | None = None, optimizer_state: dict[str, Any] | None = None) -> Path:
    """``rng_states``: every process's (default: this process's alone); ``model_state`` and
    ``optimizer_state``: full state dicts gathered from sharded (FSDP) processes."""
    final = Path(out_dir) / f"checkpoint-{step}"
    tmp = Path(out_dir) / f".checkpoint-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, state_dict=model_state)
    tokenizer.save_pretrained(tmp)
    torch.save(optimizer_state if optimizer_state is not None else optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    states = rng_states if rng_states is not None else [rng_state()]
    torch.save({"world_size": len(states), "states": states}, tmp / RNG_FILE)
    (tmp / STATE).write_text(json.dumps({"step": step, "world_size": len(states), **state}, indent=2))
    if scorer is not None and (scorer.learned or scorer.mixer is not None):
        torch.save({"learned_rewards": scorer.state_dict()}, tmp / LEARNED)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return final


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
            raise FileNotFoundError(f"--resume_from_checkpoint: {ckpt} has no {LEARNED}, but the run has learned "
                                    "rewards whose state it needs")
        scorer.load_state_dict(torch.load(ckpt / LEARNED, weights_only=False)["learned_rewards"])
    optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=False))
    scheduler.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=False))
    return state
