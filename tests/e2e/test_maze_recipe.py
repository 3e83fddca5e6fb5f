"""The maze recipe (recipes/tiny/maze_gigpo.yaml) trains through `grouprl train`, with GiGPO and with
`--advantage grpo`: its first step, fast (no warm start); and the learning study's script, slow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grouprl.cli import main

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "tiny" / "maze_gigpo.yaml"


@pytest.mark.parametrize("advantage", ["gigpo", "grpo"])
def test_the_maze_recipes_first_step_runs(tmp_path, advantage):
    """The recipe as shipped but one step and an untrained model of the recipe's shape (its SFT takes
    minutes): the step's episodes fill the recipe's groups and meet the same cells."""
    out = tmp_path / advantage
    argv = ["train", "--config", str(RECIPE), "--advantage", advantage, "--max_steps", "1", "--sft_steps", "0"]
    assert main([*argv, "--output_dir", str(out), "--device", "cpu"]) == 0
    (metrics,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert 1 <= metrics["episode_length"] <= 30 and metrics["samples"] == pytest.approx(32 * metrics["episode_length"])
    assert metrics["anchor_nonsingleton_share"] > 0.5  # at least every group's first steps share the start
    records = [json.loads(line) for line in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()]
    assert len(records) == 32 and {r["seed"] % 4 for r in records} <= {0, 1, 2, 3}
    assert all(r["prompt"].count("Maze ") == 1 and "Goal " in r["prompt"] for r in records)
    assert json.loads((out / "config.json").read_text())["algorithm"]["advantage"] == advantage


@pytest.mark.slow
def test_the_learning_study_runs_one_seed(tmp_path):
    """bench/credit/gigpo_vs_grpo.py on one seed and 3 steps (its warm start: about 2 minutes on 2 cores)."""
    out = tmp_path / "study.json"
    argv = ["--seeds", "0", "--max_steps", "3", "--out", str(out), "--work", str(tmp_path / "runs")]
    subprocess.run([sys.executable, "-m", "bench.credit.gigpo_vs_grpo", *argv], cwd=ROOT, check=True)
    results = json.loads(out.read_text())
    assert {(r["seed"], r["estimator"]) for r in results["runs"]} == {(0, "gigpo"), (0, "grpo")}
    assert all(len(r["curves"]["success"]) == 3 for r in results["runs"])
    assert out.with_suffix(".png").is_file() and "paired_success_last_difference" in results["summary"]
