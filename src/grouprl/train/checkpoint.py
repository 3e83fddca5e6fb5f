"""Checkpoints: model + tokenizer + optimizer + scheduler + RNG + step + data position, and the
scorer's learned state (learned rewards, mixer) when it has any.

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
LEARNED = "learned_rewards.pt"  # {"learned_rewards": scorer.state_dict()}


def save_checkpoint(out_dir: str | Path, step: int, model, tokenizer, optimizer, scheduler,
                    state: dict[str, Any], scorer=None) -> Path:
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
    ckpt = Path(ckpt)
    state = read_checkpoint_state(ckpt)
    if scorer is not None and (scorer.learned or scorer.mixer is not None):
        if not (ckpt / LEARNED).is_file():
            raise FileNotFoundError(f"--resume_from_checkpoint: {ckpt} has no {LEARNED}, but the run has learned "
                                    "rewards whose state it needs")
        scorer.load_state_dict(torch.load(ckpt / LEARNED, weights_only=False)["learned_rewards"])
    optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=False))
    scheduler.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=False))
    rng = torch.load(ckpt / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return state
