"""Checkpoints: model + tokenizer + optimizer + scheduler + RNG + step + data position.

Written to a temporary dir and renamed into place, so a crash never leaves a torn checkpoint.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE = "trainer_state.json"


def save_checkpoint(out_dir: str | Path, step: int, model, tokenizer, optimizer, scheduler,
                    state: dict[str, Any]) -> Path:
    final = Path(out_dir) / f"checkpoint-{step}"
    tmp = Path(out_dir) / f".checkpoint-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}, tmp / "rng.pt")
    (tmp / STATE).write_text(json.dumps({"step": step, **state}, indent=2))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return final


def read_checkpoint_state(ckpt: str | Path) -> dict[str, Any]:
    ckpt = Path(ckpt)
    if not (ckpt / STATE).is_file():
        raise FileNotFoundError(f"--resume_from_checkpoint: {ckpt} has no {STATE}; not a grouprl checkpoint")
    return json.loads((ckpt / STATE).read_text())


def load_checkpoint(ckpt: str | Path, optimizer, scheduler) -> dict[str, Any]:
    ckpt = Path(ckpt)
    state = read_checkpoint_state(ckpt)
    optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=False))
    scheduler.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=False))
    rng = torch.load(ckpt / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return state
