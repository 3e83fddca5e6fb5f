"""``grouprl train --agent`` with an agent that cannot run stops, loudly: an agent that always raises stops
the run at its preflight episode, before any training; one that passes the preflight but then fails every
episode takes no optimizer step and stops after ``max_failed_agent_steps`` steps (exit 1, the cause named)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from safetensors.torch import load_file

from grouprl.cli import main

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "tiny" / "tool_arithmetic_agent.yaml"
ARGS = [
    "--batch_size",
    "1",
    "--num_generations",
    "2",
    "--n_eval",
    "0",
    "--max_new_tokens",
    "8",
    "--seed",
    "5",
    "--device",
    "cpu",
    "--logging_steps",
    "1",
]

ALWAYS_RAISES = """
async def run(client, row, **extras):
    return connect_tools()


def connect_tools():
    raise ConnectionError("cannot reach the tool server at http://tools.internal:9000")
"""

FAILS_AFTER_THE_PREFLIGHT = """
PLAYED = []


async def run(client, row, model="policy", **_):
    PLAYED.append(row["question"])
    messages = [{"role": "user", "content": row["question"]}]
    await client.chat.completions.create(model=model, messages=messages, max_tokens=8)
    if len(PLAYED) > 1:  # the preflight's episode was the first
        raise RuntimeError("the tool server went away")
    return 0.0
"""


def _train(model: Path, out: Path, agent_source: str, *extra: str) -> int:
    agent = out.parent / f"agent_{out.name}.py"
    agent.write_text(agent_source)
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
            f"{agent}:run",
            *ARGS,
            *extra,
        ]
    )


def _agent_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "agent" in r.name]


def test_an_agent_that_always_raises_stops_the_run_at_its_preflight(tiny_tool_model, tmp_path, capsys, caplog):
    with caplog.at_level(logging.WARNING, logger="grouprl"):
        code = _train(tiny_tool_model, tmp_path / "run", ALWAYS_RAISES, "--max_steps", "3")
    err = capsys.readouterr().err
    assert code == 1
    [line] = [x for x in err.splitlines() if x.startswith("grouprl: run stopped:")]
    assert "the agent failed its preflight episode" in line and "before any training" in line
    assert "agent_raised: ConnectionError: cannot reach the tool server at http://tools.internal:9000" in line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no step was taken
    [printed] = _agent_warnings(caplog)  # the first failure, with the agent's traceback
    assert "in connect_tools" in printed and "ConnectionError" in printed


def test_an_agent_that_fails_every_episode_after_the_preflight_stops_after_three_steps(
    tiny_tool_model, tmp_path, capsys, caplog
):
    run = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="grouprl"):
        code = _train(tiny_tool_model, run, FAILS_AFTER_THE_PREFLIGHT, "--max_steps", "8", "--save_steps", "1")
    err = capsys.readouterr().err
    assert code == 1
    [line] = [x for x in err.splitlines() if x.startswith("grouprl: run stopped:")]
    assert "every agent episode failed in 3 steps in a row (max_failed_agent_steps: 3)" in line
    assert "agent_raised x2; agent_raised: RuntimeError: the tool server went away" in line
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert [m["agent/all_failed_steps"] for m in metrics] == [1.0, 2.0, 3.0]
    assert all(m["agent/failed/agent_raised"] == 2 and m["agent/calls_per_episode"] == 1 for m in metrics)
    assert all(m["loss"] == 0.0 and m["grad_norm"] == 0.0 for m in metrics)  # no optimizer step
    before, after = (
        load_file(tiny_tool_model / "model.safetensors"),
        load_file(run / "checkpoint-2" / "model.safetensors"),
    )
    assert all(torch.equal(before[k], after[k]) for k in before)  # the weights never moved
    warnings = _agent_warnings(caplog)
    assert sum("an agent episode failed (agent_raised)" in w for w in warnings) == 1  # printed once, not per step
    assert sum("every agent episode failed" in w and "no optimizer step" in w for w in warnings) == 3


def test_the_limit_is_configurable(tiny_tool_model, tmp_path, capsys):
    code = _train(
        tiny_tool_model,
        tmp_path / "run",
        FAILS_AFTER_THE_PREFLIGHT,
        "--max_steps",
        "4",
        "--max_failed_agent_steps",
        "1",
    )
    assert code == 1 and "in 1 steps in a row (max_failed_agent_steps: 1)" in capsys.readouterr().err


def test_a_run_shorter_than_the_limit_whose_every_step_failed_exits_1(tiny_tool_model, tmp_path, capsys):
    code = _train(tiny_tool_model, tmp_path / "run", FAILS_AFTER_THE_PREFLIGHT, "--max_steps", "2")
    assert code == 1  # 2 steps < the default limit of 3, none trained: not a finished run
    [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith("grouprl: run stopped:")]
    assert "every agent episode of all 2 step(s) of the run failed: nothing was trained" in line


RAISES_AFTER_A_CALL = """
async def run(client, row, model="policy", **_):
    messages = [{"role": "user", "content": row["question"]}]
    await client.chat.completions.create(model=model, messages=messages, max_tokens=8)
    raise ValueError("Tool calculator_args not found")  # what a framework raises on a model's invented tool name
"""


def test_a_failure_after_served_calls_passes_the_preflight_and_stops_after_three_steps(tiny_tool_model, tmp_path):
    """A framework that raises on the model's output (an untrained model's invented tool name) is not an agent
    that cannot run: the preflight lets it train; every episode failing, the run stops after 3 steps."""
    agent = tmp_path / "agent.py"
    agent.write_text(RAISES_AFTER_A_CALL)
    out = tmp_path / "run"
    args = ["train", "--config", str(RECIPE), "--model_name_or_path", str(tiny_tool_model), "--output_dir", str(out)]
    assert main([*args, "--agent", f"{agent}:run", "--max_steps", "10", *ARGS]) == 1
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3] and all(m["agent/calls_per_episode"] == 1 for m in metrics)
