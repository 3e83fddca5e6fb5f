"""SIGTERM as a cluster delivers it: to every process of a two-process run, and twice to each rank.

SLURM signals every process of a job step (``#SBATCH --signal``, ``scancel --signal``, the time limit), the
launcher included, and the launcher (``torchrun``; ``accelerate launch`` runs the same agent) forwards its own
copy to each rank a few milliseconds later; its ranks sit in sessions of their own, so a signal to the
launcher's process group alone reaches them only through that forward. Each rank must take the two copies as
one request: finish the step in progress, write its rollout records, save, exit 143; the resumed run then
holds every step's records exactly once. The launcher itself exits 1 with its own ``SignalException``
traceback once its ranks are gone (torch's agent re-raises the signal it shut them down for).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from grouprl.job import preemption as P
from launch import child_env, torchrun
from run_helpers import TINY_RUN, rollout_steps
from run_helpers import metric_steps as steps

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

ARGS = [*TINY_RUN, "--n_train", "200"]

# Half a second a call (4 samples a rank): a step lasts seconds, so the launcher's copy lands inside one.
SLOW_REWARD = textwrap.dedent("""
    import time

    def slow_exact(completion, ground_truth, **row):
        time.sleep(0.5)
        return float(completion.strip() == str(ground_truth))
""")


def test_a_copy_of_the_first_sigterm_is_the_same_request_a_later_one_stops_at_once(monkeypatch):
    early = P.Preemption()  # before the first step: at once, and the copy does not cut the stop's cleanup
    with pytest.raises(P.Preempted, match=r"stopped by SIGTERM \(nothing new to save\)"):
        early._on_sigterm(signal.SIGTERM, None)
    early._on_sigterm(signal.SIGTERM, None)

    stop = P.Preemption()
    stop.step_finished = True
    stop._on_sigterm(signal.SIGTERM, None)
    assert stop.requested
    stop._on_sigterm(signal.SIGTERM, None)  # the launcher's copy, milliseconds later: no stop mid-step
    assert stop.requested
    monkeypatch.setattr(P, "REPEAT_WINDOW_S", 0.0)  # a second request, past the window: at once
    with pytest.raises(P.Preempted, match="a second SIGTERM before the step in progress finished: nothing saved"):
        stop._on_sigterm(signal.SIGTERM, None)


def children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.parametrize("delivery", [pytest.param("launcher", marks=pytest.mark.slow), "every_process"])
def test_two_process_run_stopped_by_sigterm_resumes_with_every_record_once(tiny_arithmetic_dir, tmp_path, delivery):
    (tmp_path / "slow.py").write_text(SLOW_REWARD)
    out = tmp_path / "run"
    args = ["--model_name_or_path", str(tiny_arithmetic_dir), "--output_dir", str(out), *ARGS]
    args += ["--rewards", f"{tmp_path / 'slow.py'}:slow_exact"]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    proc = subprocess.Popen(
        [*launcher, "-m", "grouprl.cli", "train", *args, "--max_steps", "500"],
        env=child_env({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "120"}),  # the default 30 s: a SIGKILL for slow steps
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as srun's task
    )
    try:
        deadline = time.monotonic() + 300
        while not steps(out) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert steps(out), "step 1 never finished"
        time.sleep(0.5)  # both ranks inside step 2 (a step takes seconds), past step 1's observers
        ranks = children(proc.pid)
        assert len(ranks) == 2, ranks
        if delivery == "every_process":  # SLURM's copy to each rank, then the launcher's (forwarded again)
            for pid in ranks:
                os.kill(pid, signal.SIGTERM)
            time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1 and "SignalException" in err, err[-4000:]  # the launcher's own report
    last = steps(out)[-1]
    ckpt = out / f"checkpoint-{last}"
    assert err.count(f"grouprl: run stopped: stopped by SIGTERM after step {last}; saved {ckpt}") == 2, err[-4000:]
    assert "nothing saved" not in err and "nothing new to save" not in err and "terminate called" not in err
    assert err.count("Traceback") == 1, err[-4000:]  # the launcher's; no rank's
    assert (ckpt / "trainer_state.json").is_file()
    assert rollout_steps(out) == {s: 8 for s in range(1, last + 1)}  # both ranks' groups, the stopped step's too

    torchrun(
        ["-m", "grouprl.cli", "train", *args, "--max_steps", str(last + 1), "--resume_from_checkpoint", str(ckpt)],
        timeout=300,
        cwd=tmp_path,
    )
    assert steps(out)[-1] == last + 1
    assert rollout_steps(out) == {s: 8 for s in range(1, last + 2)}  # every step's records, each once
