"""A full disk during a checkpoint: a clear error, earlier checkpoints kept, no partial temp dir.

The disk is a real size-limited tmpfs mounted for the test (needs root: CI runs as root; it
skips elsewhere), sized to hold one checkpoint of the tiny model but not two.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grouprl.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@pytest.fixture()
def small_disk(tmp_path):
    mounts: list[Path] = []

    def make(size_bytes: int) -> Path:
        mnt = tmp_path / f"disk{len(mounts)}"
        mnt.mkdir()
        p = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(mnt)], capture_output=True, text=True
        )
        if p.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here (needs root): {p.stderr.strip()}")
        mounts.append(mnt)
        return mnt

    yield make
    for mnt in mounts:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_says_so_and_keeps_the_earlier_checkpoint(tiny_arithmetic_dir, tmp_path, small_disk):
    model = AutoModelForCausalLM.from_pretrained(tiny_arithmetic_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_arithmetic_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    optimizer.step()  # optimizer state (exp_avg...) makes the checkpoint ~3x the weights
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    args = (model, tokenizer, optimizer, scheduler, {"extra": {}})

    size = _dir_bytes(save_checkpoint(tmp_path / "measure", 1, *args))
    disk = small_disk(int(size * 1.5) // 4096 * 4096)
    first = save_checkpoint(disk, 1, *args)
    before = {p.name: p.stat().st_size for p in first.iterdir()}

    with pytest.raises(CheckpointError) as info:
        save_checkpoint(disk, 2, *args)
    message = str(info.value)
    assert "No space left on device" in message and "checkpoint-2" in message
    assert sorted(p.name for p in disk.iterdir()) == ["checkpoint-1"]  # no .checkpoint-2.tmp left
    assert {p.name: p.stat().st_size for p in first.iterdir()} == before
    assert load_checkpoint(first, optimizer, scheduler)["step"] == 1
