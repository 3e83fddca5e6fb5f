"""An agent the user wrote trains unchanged through ``grouprl train --agent``: the endpoint serves the tiny
model, the agent's calls become samples, the metrics say what the agents did; a resumed run and two
processes (each with its own endpoint) too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


from grouprl.cli import main

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "tiny" / "tool_arithmetic_agent.yaml"
CALCULATOR = f"{ROOT / 'examples' / 'agents' / 'calculator_agent.py'}:run"
COMPACTING = f"{ROOT / 'examples' / 'agents' / 'compacting_agent.py'}:run"
ARGS = [
    "--max_steps",
    "2",
    "--batch_size",
    "2",
    "--num_generations",
    "2",
    "--n_eval",
    "2",
    "--max_new_tokens",
    "24",
    "--seed",
    "5",
    "--device",
    "cpu",
    "--logging_steps",
    "1",
    "--save_trajectories_every",
    "1",
]


def _train(model: Path, out: Path, agent: str, *extra: str) -> int:
    return main(
        [
            "train",
            "--config",
            str(RECIPE),
            "--model_name_or_path",
            str(model),
            "--output_dir",
            str(out),
            "--agent",
            agent,
            *ARGS,
            *extra,
        ]
    )


def _metrics(path: Path) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_grouprl_train_with_an_agent_trains_and_resumes(tiny_tool_model, tmp_path):
    run = tmp_path / "run"
    assert _train(tiny_tool_model, run, CALCULATOR, "--save_steps", "1") == 0
    metrics = _metrics(run / "metrics.jsonl")
    assert sorted(metrics) == [1, 2]
    for m in metrics.values():
        assert m["agent/calls_per_episode"] >= 1 and m["agent/failed_episodes"] == 0
        assert m["agent/merged_episodes"] == 1.0 and m["agent/latency_s"] > 0
        assert m["samples"] == 4 and "loss" in m
    rollouts = [json.loads(line) for line in (run / "rollouts" / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 8 and all(r["agent"]["calls"] == r["episode_length"] for r in rollouts)
    assert all(r["agent"]["failure"] is None and r["agent"]["segments"] == 1 for r in rollouts)
    # interrupted after checkpoint-1 and resumed: it finishes step 2 from the saved state
    shutil.rmtree(run / "checkpoint-2")
    (run / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text().splitlines(keepends=True)[0])
    assert _train(tiny_tool_model, run, CALCULATOR, "--resume_from_checkpoint", str(run / "checkpoint-1")) == 0
    resumed = _metrics(run / "metrics.jsonl")
    assert sorted(resumed) == [1, 2] and resumed[2]["agent/calls_per_episode"] >= 1
    assert (run / "checkpoint-2").is_dir()


def test_a_history_rewriting_agent_trains_on_split_samples(tiny_tool_model, tmp_path):
    """The compacting agent returns its own reward (0 for the untrained model's answers)."""
    assert _train(tiny_tool_model, tmp_path / "run", COMPACTING, "--max_steps", "1") == 0
    m = _metrics(tmp_path / "run" / "metrics.jsonl")[1]
    assert m["samples"] == 4 * m["agent/samples_per_episode"] and m["agent/samples_per_episode"] >= 1
    assert m["reward"] <= 0.0  # its own 0 (minus the penalty of a malformed call)


def test_two_processes_each_serve_their_own_agents(tiny_tool_model, tmp_path):
    from launch import torchrun

    out = tmp_path / "ddp"
    torchrun(
        [
            "-m",
            "grouprl.cli",
            "train",
            "--config",
            str(RECIPE),
            "--model_name_or_path",
            str(tiny_tool_model),
            "--output_dir",
            str(out),
            "--agent",
            CALCULATOR,
            *ARGS,
            "--n_eval",
            "0",
        ],
        nproc=2,
        timeout=400,
    )
    metrics = _metrics(out / "metrics.jsonl")
    assert sorted(metrics) == [1, 2] and all(m["agent/calls_per_episode"] >= 1 for m in metrics.values())
