"""slurm/train.slurm against a real SLURM: munged, slurmctld and slurmd started on localhost for
this module (tests/infra/slurm_local.py), jobs submitted with sbatch, waited for, outputs checked.
Skips only where the SLURM/munge binaries are not installed (.ci/install-system-deps installs them)."""

from __future__ import annotations

import json
import sys

import pytest

from launch import REPO_ROOT, child_env
from slurm_local import LocalSlurm, missing_binaries

pytestmark = pytest.mark.skipif(
    bool(missing_binaries()),
    reason=f"SLURM/munge not installed ({missing_binaries()}); "
    "run .ci/install-system-deps (Debian: slurmctld slurmd slurm-client munge)",
)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"), cpus=2)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def test_srun_places_two_tasks(slurm, tmp_path):
    script = tmp_path / "hello.sh"
    script.write_text("#!/bin/bash\nsrun bash -c 'echo task=$SLURM_PROCID ntasks=$SLURM_NTASKS seed=$SEED'\n")
    job = slurm.sbatch("--ntasks=2", f"--output={tmp_path / 'out.txt'}", str(script), env={"SEED": "7"})
    info = slurm.wait(job, timeout=60)
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), slurm.logs()
    lines = sorted((tmp_path / "out.txt").read_text().split())
    assert lines == sorted(["task=0", "task=1", "ntasks=2", "ntasks=2", "seed=7", "seed=7"])


def test_train_slurm_runs_the_tiny_default_with_two_tasks(slurm, tmp_path):
    """Two SLURM tasks, each an `accelerate launch` of one process (accelerate's two "machines",
    ranks from SLURM_PROCID, the main address and port from SLURM), training together over gloo."""
    out = tmp_path / "run"
    env = child_env({"PYTHON": sys.executable, "SEED": "3", "GRAIL_MAX_HISTORY": "5"})
    job = slurm.sbatch(
        "--nodes=1",
        "--ntasks=2",
        "--ntasks-per-node=2",
        f"--output={tmp_path / 'job.out'}",
        str(REPO_ROOT / "slurm" / "train.slurm"),
        "--",
        "--max_steps",
        "2",
        "--sft_steps",
        "10",
        "--sft_batch_size",
        "16",
        "--n_train",
        "200",
        "--n_eval",
        "4",
        "--batch_size",
        "2",
        "--num_generations",
        "4",
        "--device",
        "cpu",
        "--output_dir",
        str(out),
        env=env,
        cwd=REPO_ROOT,
    )
    info = slurm.wait(job, timeout=500)
    log = (tmp_path / "job.out").read_text()
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), log[-5000:]
    assert "2 task(s) x 1 process(es) = 2" in log and "SEED=3" in log and "GRAIL_MAX_HISTORY=5" in log
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # logged once, by process 0 of the two tasks
    assert json.loads((out / "config.json").read_text())["train"]["seed"] == 3  # SEED reached the trainer
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["world_size"] == 2 and state["data_position"] == 4
