"""Asynchronous rollouts with two real processes (torchrun, gloo on CPU): each process's producer makes its
share of every batch, the gather stays on the learner's thread, and the run neither deadlocks nor trains a
token past the staleness bound nor loses its data position."""

from __future__ import annotations

import json

import pytest

from launch import torchrun

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

TINY = [
    "--model",
    "tiny",
    "--sft_steps",
    "10",
    "--sft_batch_size",
    "16",
    "--n_train",
    "200",
    "--n_eval",
    "0",
    "--batch_size",
    "2",
    "--num_generations",
    "4",
    "--logging_steps",
    "1",
    "--device",
    "cpu",
]


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_two_process_async_run_keeps_the_bound_and_the_data_order(tmp_path):
    run = tmp_path / "run"
    torchrun(
        [
            "-m",
            "grouprl.cli",
            "train",
            *TINY,
            "--max_steps",
            "3",
            "--output_dir",
            str(run),
            "--rollout_mode",
            "async",
            "--max_staleness",
            "1",
            "--max_inflight",
            "2",
            "--rollout_timeout",
            "120",
        ],
        nproc=2,
        timeout=500,
        cwd=tmp_path,
    )
    assert [m["step"] for m in _rows(run / "metrics.jsonl")] == [1, 2, 3]
    rollouts = _rows(run / "rollouts" / "rollouts.jsonl")
    assert [r["step"] for r in rollouts] == [1] * 8 + [2] * 8 + [3] * 8  # both processes' groups, once each
    for r in rollouts:
        assert 0 <= r["step"] - 1 - r["policy_versions"][0] <= 1, r
    prompts = [r["prompt"] for r in rollouts if r["episode"].endswith("-e0")]
    assert len(prompts) == 6 and len(set(prompts)) == 6  # 2 rows a step, none repeated or lost
    assert json.loads((run / "checkpoint-3" / "trainer_state.json").read_text())["data_position"] == 6
