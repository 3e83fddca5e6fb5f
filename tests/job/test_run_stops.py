"""A planned stop reads the same in every rollout mode: a reward that fails past the error budget stops a sync,
one_step_off or async run with exit code 1 and one line, ``grouprl: run stopped: ...`` naming the reward (the
async producer's failure carries its cause's message and exit code), and a hit ``rollout_timeout`` stops an
async run promptly in one line too; never a traceback, never an abort with a producer inside torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from launch import child_env
from run_helpers import TINY_RUN

ARGS = [*TINY_RUN, "--n_train", "200", "--max_steps", "5"]

REWARDS = textwrap.dedent("""
    import time

    def always_fails(completion, ground_truth, **row):
        raise ValueError("this reward cannot score anything")

    def sleeps(completion, ground_truth, **row):
        time.sleep(600)  # far past rollout_timeout and reward_timeout (60 s): a hung reward
        return 0.0
""")


def train(model_dir, tmp_path, *args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    """``grouprl train`` in a subprocess (so an abort at exit shows): its result and its seconds."""
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    cmd = [sys.executable, "-m", "grouprl.cli", "train", "--model_name_or_path", str(model_dir), *ARGS, *args]
    cmd += ["--output_dir", str(tmp_path / "run")]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env(), cwd=tmp_path)
    return proc, time.monotonic() - start


def last_line(stderr: str) -> str:
    return [line for line in stderr.splitlines() if line.strip()][-1]


def assert_one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr and "terminate called" not in proc.stderr, proc.stderr[-4000:]
    line = last_line(proc.stderr)
    assert line.startswith("grouprl: run stopped: "), proc.stderr[-4000:]
    return line


@pytest.mark.parametrize("mode", ["sync", "one_step_off", "async"])
def test_a_failing_reward_stops_every_mode_in_one_line(tiny_arithmetic_dir, tmp_path, mode):
    reward = str(tmp_path / "my_rewards.py") + ":always_fails"
    proc, _ = train(tiny_arithmetic_dir, tmp_path, "--rewards", reward, "--rollout_mode", mode)
    line = assert_one_line(proc)
    assert "8 of 8 samples failed in reward functions (> max_reward_error_fraction=0.1)" in line
    assert f"{reward}: ValueError: this reward cannot score anything" in line  # the reward, named
    if mode != "sync":  # where it happened, after sync's own message
        assert line.endswith("(in the rollout producer, batch 0; RewardFailure)"), line


def test_a_hit_rollout_timeout_stops_an_async_run_promptly_in_one_line(tiny_arithmetic_dir, tmp_path):
    reward = str(tmp_path / "my_rewards.py") + ":sleeps"
    args = ("--rewards", reward, "--rollout_mode", "async", "--rollout_timeout", "2")
    proc, seconds = train(tiny_arithmetic_dir, tmp_path, *args, timeout=120)
    line = assert_one_line(proc)
    assert "no rollout batch finished within rollout_timeout=2s (batch 0" in line
    assert "raise rollout_timeout (section rollout)" in line
    # startup (about 7 s here), the 2 s wait and at most 2 s more for close to give up on the hung producers:
    # the process never waits for the reward's sleep nor for its 60 s reward_timeout
    assert seconds < 55, seconds
