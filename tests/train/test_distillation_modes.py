"""On-policy distillation where the batch is produced elsewhere: async rollouts (the producer samples ahead,
the learner's teacher scores what it trains on) and two data-parallel processes (each scores its own share).
Both through the real CLI on the tiny model; the teacher is an SFT-warmed tiny checkpoint."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from launch import REPO_ROOT, child_env
from run_helpers import TINY_RUN, train

DISTILL_METRICS = ("distill/teacher_time", "distill/kl_mean", "distill/reward_mean")


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _distilled(rows: list[dict]) -> None:
    for row in rows:
        assert all(math.isfinite(row[k]) for k in DISTILL_METRICS), row
        assert row["distill/kl_mean"] > 0  # the untrained student is far from the SFT-warmed teacher


@pytest.mark.parametrize("mode", ["one_step_off", "async"])
def test_distillation_under_a_rollout_producer(tmp_path, tiny_arithmetic_dir, warm_arithmetic_dir, mode):
    out = tmp_path / "run"
    args = ("--teacher", str(warm_arithmetic_dir), "--distill_coef", "1.0", "--max_steps", "3")
    assert train(tiny_arithmetic_dir, out, *args, "--rollout_mode", mode) == 0
    rows = _rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    _distilled(rows)


def test_distillation_on_two_processes(tmp_path, tiny_arithmetic_dir, warm_arithmetic_dir):
    out = tmp_path / "run"
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]
    launch += [str(REPO_ROOT / "recipes" / "accelerate_configs" / "ddp.yaml"), "--num_processes", "2"]
    launch += ["--main_process_port", "0", "--dynamo_backend", "no", "-m", "grouprl.cli", "train"]
    run = ["--model_name_or_path", str(tiny_arithmetic_dir), "--output_dir", str(out), "--max_steps", "2"]
    run += [*TINY_RUN, "--n_train", "20", "--teacher", str(warm_arithmetic_dir), "--distill_coef", "1.0"]
    proc = subprocess.run(launch + run, capture_output=True, text=True, timeout=400, env=child_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    rows = _rows(out)
    assert [r["step"] for r in rows] == [1, 2]  # logged once, by process 0
    _distilled(rows)
