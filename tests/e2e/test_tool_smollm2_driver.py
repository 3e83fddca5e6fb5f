"""The real-model tool driver (experiments/tool_smollm2.py) end to end on a tiny model: tool SFT with its
stop checks, one held-out measurement before RL, a ``grouprl train`` run through the example agent per
seed, the after measurement on that run's final checkpoint, and the results file with what the docs cite.
The SmolLM2 run itself (about an hour of one CPU thread) is not a test: its command and numbers are in
docs/real_models.md, "A real model learns the tools"."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _driver():
    spec = importlib.util.spec_from_file_location("tool_smollm2", ROOT / "experiments" / "tool_smollm2.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_driver_warms_measures_trains_through_the_agent_and_measures_again(tiny_tool_model, tmp_path):
    driver = _driver()
    out, work = tmp_path / "results", tmp_path / "work"
    args = [
        "--model",
        str(tiny_tool_model),
        "--sft_steps",
        "2",
        "--check_every",
        "1",
        "--n_check",
        "2",
        "--sft_target",
        "1.01",
        "--seeds",
        "0",
        "1",
        "--max_steps",
        "1",
        "--batch_size",
        "2",
        "--num_generations",
        "2",
        "--n_eval",
        "3",
        "--sft_learning_rate",
        "1e-3",
        "--out",
        str(out),
        "--work",
        str(work),
    ]
    result = driver.main(args)
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(result))
    assert (out / "held_out.png").stat().st_size > 0
    # the SFT ran both steps (the unreachable target never stopped it), checking after each
    assert [c["step"] for c in result["sft"]["checks"]] == [1, 2]
    assert (Path(result["sft"]["model"]) / "model.safetensors").is_file()
    before = result["before"]
    assert before["n"] == 3 and sum(k["n"] for k in before["by_kind"].values()) == 3
    assert before["agent/calls_per_episode"] >= 1  # played by the example agent through the endpoint
    for seed in ("0", "1"):
        run = result["seeds"][seed]
        assert Path(run["checkpoint"]).name == "checkpoint-1" and Path(run["checkpoint"]).is_dir()
        assert [s["step"] for s in run["steps"]] == [1] and run["steps"][0]["agent/calls_per_episode"] >= 1
        assert run["after"]["n"] == 3 and 0.0 <= run["after"]["accuracy"] <= 1.0
        solved = sum(k["solved"] for k in run["after"]["by_kind"].values())
        assert solved == round(run["after"]["accuracy"] * 3)  # the by-kind counts are the records' verdicts
    assert result["after_mean"] == pytest.approx(sum(r["after"]["accuracy"] for r in result["seeds"].values()) / 2)
    # the seeds trained from the same warm model but apart: their rollouts are their own
    rollouts = [(work / f"rl_seed{s}" / "rollouts" / "rollouts.jsonl").read_text() for s in (0, 1)]
    assert rollouts[0] and rollouts[1] and rollouts[0] != rollouts[1]
    # a relaunch from its results reuses the SFT model, the before measurement and the finished seeds, and
    # trains only a seed it has not run
    shutil.copy(out / "results.json", tmp_path / "first.json")
    seed0_metrics = (work / "rl_seed0" / "metrics.jsonl").read_text()
    again = driver.main(
        args[: args.index("--seeds") + 1]
        + ["0", "2"]
        + args[args.index("--seeds") + 3 :]
        + ["--warm", str(tmp_path / "first.json")]
    )
    assert again["sft"] == result["sft"] and again["before"] == result["before"]
    assert again["seeds"]["0"] == result["seeds"]["0"] and sorted(again["seeds"]) == ["0", "2"]
    assert (work / "rl_seed2" / "metrics.jsonl").is_file()
    assert (work / "rl_seed0" / "metrics.jsonl").read_text() == seed0_metrics  # not trained again
