"""`grouprl train` on a device that fills up: one line naming "No space left on device" (or the
file-size limit), the device and the folder; earlier checkpoints and whole log lines kept; a resume
from `last` once space is freed finishes the run with every step logged once.

Real limits only: a size-limited tmpfs (needs root, as CI runs; skipped elsewhere) and RLIMIT_FSIZE."""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys

import pytest

from grouprl.train.checkpoint import check_checkpoint
from launch import child_env


def _train(model, out, *extra, limit=None):
    cmd = [
        sys.executable,
        "-m",
        "grouprl.cli",
        "train",
        "--task",
        "arithmetic",
        "--model_name_or_path",
        str(model),
        "--output_dir",
        str(out),
        "--max_steps",
        "3",
        "--batch_size",
        "2",
        "--num_generations",
        "4",
        "--max_new_tokens",
        "4",
        "--n_eval",
        "0",
        "--n_train",
        "20",
        "--device",
        "cpu",
        "--seed",
        "3",
        *extra,
    ]
    cap = None if limit is None else (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=child_env(), preexec_fn=cap)


def _whole_lines(path):
    data = path.read_bytes()
    assert data.endswith(b"\n"), path  # no torn last line
    return [json.loads(line) for line in data.splitlines()]


@pytest.fixture()
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    # room for one checkpoint of the tiny model (~200 KB) and the logs, not for two
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {made.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_at_a_checkpoint_then_resume(tiny_arithmetic_dir, small_disk):
    out = small_disk / "run"
    proc = _train(tiny_arithmetic_dir, out, "--save_steps", "1")
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    # The disk fills at checkpoint 2 or 3 (a step whose advantages are all zero leaves the optimizer state,
    # and so the checkpoint, smaller): whichever, one line, every earlier checkpoint whole, no partial one.
    stopped = re.match(r"grouprl: run stopped: could not write checkpoint-(\d+) ", last)
    assert stopped and int(stopped.group(1)) in (2, 3) and "Traceback" not in proc.stderr, last
    n = int(stopped.group(1))
    assert "No space left on device" in last and f"a tmpfs mounted at {small_disk}" in last and str(out) in last
    assert sorted(p.name for p in out.glob("*checkpoint-*")) == [f"checkpoint-{i}" for i in range(1, n)]
    for i in range(1, n):
        check_checkpoint(out / f"checkpoint-{i}")  # whole
    assert [r["step"] for r in _whole_lines(out / "metrics.jsonl")] == list(range(1, n + 1))
    subprocess.run(["mount", "-o", "remount,size=4m", str(small_disk)], check=True)  # space freed
    proc = _train(tiny_arithmetic_dir, out, "--save_steps", "1", "--resume_from_checkpoint", "last")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["step"] for r in _whole_lines(out / "metrics.jsonl")] == [1, 2, 3]
    steps = [r["step"] for r in _whole_lines(out / "rollouts" / "rollouts.jsonl")]
    assert steps == [1] * 8 + [2] * 8 + [3] * 8


def test_file_size_limit_during_a_log_append(tiny_arithmetic_dir, tmp_path):
    """The limit is hit by step 3's rollout records (config.json and two steps' records fit)."""
    out = tmp_path / "run"
    proc = _train(tiny_arithmetic_dir, out, limit=8500)  # two steps of records: ~7.0 KB; three: ~10.5 KB
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("grouprl: run stopped: File too large") and "Traceback" not in proc.stderr
    assert "writing rollouts.jsonl" in last and str(out / "rollouts") in last and "mounted at" in last
    assert [r["step"] for r in _whole_lines(out / "rollouts" / "rollouts.jsonl")] == [1] * 8 + [2] * 8
    assert [r["step"] for r in _whole_lines(out / "metrics.jsonl")] == [1, 2, 3]
