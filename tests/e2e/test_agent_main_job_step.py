"""The agent main job's first step on the real model (SmolLM2-135M-Instruct), as its recipe runs it, shrunk: the
named model is SFT-warmed (4 steps) on the task's expert conversations (``warm_start: sft``) inside ``grouprl train``, then
one GRPO step in which the example ``openai``-SDK agent plays every episode through the endpoint, then the held-out
evaluation through the same agent. The full job (8 steps, n = 200, 3 seeds) is measured in docs/agent_main_job.md;
the slow test below runs it whole."""

from __future__ import annotations

import json

import pytest
from pathlib import Path

from grouprl.cli import main
from real_model import smollm2_dir  # noqa: F401 - the session fixture

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "SmolLM2-135M-Instruct" / "grpo" / "config_tool_agent.yaml"


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_agent_main_job_warms_the_named_model_then_trains_it_through_the_agent(smollm2_dir, tmp_path):
    out = tmp_path / "run"
    args = ["train", "--config", str(RECIPE), "--model_name_or_path", str(smollm2_dir), "--output_dir", str(out)]
    args += ["--sft_steps", "4", "--sft_first_check", "4", "--max_steps", "1"]  # seed 0's SFT writes calls by step 4
    args += ["--sft_target_max", "1.0"]  # the check at step 4 ends it as it is (the band: tests/job/test_sft_band.py)
    args += ["--batch_size", "1", "--num_generations", "4", "--gradient_accumulation_steps", "1", "--n_eval", "4"]
    assert main(args) == 0
    # the warm start ran on the named model and RL started from it (the checkpoint records where it started)
    assert (out / "sft_model" / "config.json").is_file()
    checks = json.loads((out / "sft_model" / "warm_start_checks.json").read_text())
    assert [label for label, _ in checks] == ["check 1"]  # steps 1-3 only trained: one check, at step 4
    [metrics] = _lines(out / "metrics.jsonl")
    assert metrics["samples"] == 4 and metrics["update_time"] > 0
    assert metrics["agent/failed_episodes"] == 0 and metrics["agent/calls_per_episode"] >= 1
    episodes = _lines(out / "rollouts" / "rollouts.jsonl")
    assert len(episodes) == 4
    for ep in episodes:  # every episode was the agent's: its calls recorded, its chat the agent's tools and prompt
        assert ep["agent"]["calls"] >= 1
        assert ep["messages"][0]["content"].startswith("Use the tools to answer.")
    # after four SFT steps on expert conversations the model writes tool calls in the agent's episodes
    assert any(m.get("tool_calls") for ep in episodes for m in ep["messages"] if m["role"] == "assistant")
    before, after = _lines(out / "eval" / "before.jsonl"), _lines(out / "eval" / "after.jsonl")
    assert len(before) == len(after) == 4 and all("agent" in r for r in before + after)


@pytest.mark.slow
def test_the_agent_main_job_gains_twenty_points(smollm2_dir, tmp_path):  # noqa: F811
    """The README's agent main job, seed 0, as it ships: held-out greedy success through the agent (n = 200) rises
    by at least 20 points over the warm start (measured: docs/agent_main_job.md, about 10 minutes on 2 cores)."""
    out = tmp_path / "agent_main"
    args = ["train", "--config", str(RECIPE), "--model_name_or_path", str(smollm2_dir), "--output_dir", str(out)]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_eval"] == 200
    assert summary["accuracy_after"] - summary["accuracy_before"] >= 0.20, summary
