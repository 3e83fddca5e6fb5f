"""The GiGPO-vs-GRPO experiment on conversion chains (experiments/agent_gigpo_vs_grpo.py), cut to a few steps:
the warm start, its continuation, both estimators through the example agent, and the re-evaluation."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRIVER = [sys.executable, str(ROOT / "experiments" / "agent_gigpo_vs_grpo.py")]


@pytest.mark.slow
def test_the_experiment_runs_end_to_end_on_a_few_steps(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    small = ["--out", str(tmp_path), "--n_eval", "8", "--sft_steps", "50", "--sft_target", "0.99"]
    subprocess.run(
        DRIVER + small + ["--sft_continue", "50"], check=True, env=env, timeout=900
    )  # builds, then continues
    info = json.loads((tmp_path / "warmup" / "sft_info.json").read_text())
    assert info["continued"][0]["steps"] == 50 and len(info["continued"][0]["checks"]) == 1
    subprocess.run(DRIVER + small + ["--seeds", "0", "--max_steps", "2"], check=True, env=env, timeout=900)
    subprocess.run(
        DRIVER + small + ["--seeds", "0", "--max_steps", "2", "--reevaluate"], check=True, env=env, timeout=900
    )
    results = json.loads((tmp_path / "results.json").read_text())
    assert [(r["seed"], r["estimator"]) for r in results["runs"]] == [(0, "gigpo"), (0, "grpo")]
    for run in results["runs"]:
        assert run["after"]["n"] == 8 and 0 <= run["train/anchor_nonsingleton_share"] <= 1
        assert "steps/convert/compute_right" in run["after"]
        assert results["reevaluated"][f"seed0/{run['estimator']}"]["success_rate"] == run["after"]["success_rate"]
    assert run["train/step_advantage_abs"] == 0.0  # GRPO has no step advantage
