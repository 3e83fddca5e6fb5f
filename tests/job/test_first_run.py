"""A newcomer's first run: progress during the evaluation before RL, no library deprecation noise, and
the busy-machine advice."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO_ROOT
from grouprl.job.machine_load import busy_machine_advice


def test_tiny_first_run_shows_evaluation_progress_and_no_deprecation_warnings(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GROUPRL_", "PYTHONWARNINGS"))}
    env.update(PYTHONPATH=str(REPO_ROOT / "src"), OMP_NUM_THREADS="1", COLUMNS="120")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grouprl.cli",
            "train",
            "--model",
            "tiny",
            "--output_dir",
            str(tmp_path / "run"),
            "--max_steps",
            "1",
            "--batch_size",
            "2",
            "--num_generations",
            "4",
            "--max_new_tokens",
            "4",
            "--n_eval",
            "16",
            "--n_train",
            "40",
            "--sft_steps",
            "20",
            "--device",
            "cpu",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if "evaluating before RL: 0/16 prompts" in line)
    finished = next(i for i, line in enumerate(lines) if "evaluating before RL: 16/16 prompts" in line)
    result = next(i for i, line in enumerate(lines) if "held-out accuracy before RL" in line)
    assert start < finished < result and "tokens/s" in lines[finished] + lines[finished + 1]
    assert any("evaluating after RL: 0/16 prompts" in line for line in lines)
    noise = [line for line in lines if "FutureWarning" in line or "DeprecationWarning" in line]
    assert not noise, noise


def test_busy_machine_advice_is_given_only_when_the_load_is_above_the_cores_and_threads_can_change():
    advice = busy_machine_advice(load=7.3, cores=2, threads=2)
    assert advice is not None and "7.3 on 2 cores" in advice and "OMP_NUM_THREADS=1" in advice
    assert busy_machine_advice(load=1.5, cores=2, threads=2) is None
    assert busy_machine_advice(load=7.3, cores=2, threads=1) is None  # already one thread: nothing to advise
    real = busy_machine_advice()  # this machine, as it is now: None or the one line
    assert real is None or ("\n" not in real and "load average" in real)
