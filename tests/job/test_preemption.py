"""SIGTERM (SLURM's warning before preemption) saves the last finished step's checkpoint, which resumes, in
every rollout mode: the finished step's rollout records are written before the save, an async run exits 143
(never aborts with its producers inside torch), and after the resume every step's records are there once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO_ROOT
from grouprl.cli import main
from run_helpers import TINY_RUN, rollout_steps
from run_helpers import metric_steps as steps

ARGS = [*TINY_RUN, "--n_train", "200"]


@pytest.mark.parametrize("mode", ["sync", "one_step_off", "async"])
def test_sigterm_saves_the_last_finished_step_and_it_resumes(tiny_arithmetic_dir, tmp_path, mode):
    out = tmp_path / "run"
    args = [*ARGS, "--rollout_mode", mode]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grouprl.cli",
            "train",
            "--model_name_or_path",
            str(tiny_arithmetic_dir),
            "--output_dir",
            str(out),
            "--max_steps",
            "500",
            *args,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not steps(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert steps(out), "step 1 never finished"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err[-3000:]
    last = steps(out)[-1]
    assert 1 <= last < 500
    ckpt = out / f"checkpoint-{last}"
    assert (ckpt / "trainer_state.json").is_file() and (ckpt / "model.safetensors").is_file(), sorted(os.listdir(out))
    assert f"stopped by SIGTERM after step {last}" in err and str(ckpt) in err
    assert "terminate called" not in err and "Traceback" not in err
    assert rollout_steps(out) == {s: 8 for s in range(1, last + 1)}  # the preempted step's records too
    assert (
        main(
            [
                "train",
                "--model_name_or_path",
                str(tiny_arithmetic_dir),
                "--output_dir",
                str(out),
                "--max_steps",
                str(last + 1),
                "--resume_from_checkpoint",
                str(ckpt),
                *args,
            ]
        )
        == 0
    )
    assert steps(out)[-1] == last + 1 and (out / f"checkpoint-{last + 1}").is_dir()
    assert rollout_steps(out) == {s: 8 for s in range(1, last + 2)}  # every step's records, each once
