"""The agent in the CLI: ``grouprl eval --agent`` evaluates a checkpoint through the same agent and endpoint as
training (held-out success, calls per episode, failures by kind; exit 1 when every episode failed), and
``--agent`` alone implies ``episode_mode: conversation`` and the agents' context limit."""

from __future__ import annotations

import json
from pathlib import Path


from grouprl.cli import build_parser, config_from_args, main

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "tiny" / "tool_arithmetic_agent.yaml"
CALCULATOR = f"{ROOT / 'examples' / 'agents' / 'calculator_agent.py'}:run"


def _eval(model: Path, out: Path, agent: str, *extra: str) -> int:
    return main(
        ["eval", "--model", str(model), "--task", "tool_arithmetic", "--agent", agent, "--n", "2"]
        + ["--max_new_tokens", "16", "--device", "cpu", "--out", str(out), *extra]
    )


def test_grouprl_eval_runs_the_agent_through_the_endpoint(tiny_tool_model, tmp_path, capsys):
    out = tmp_path / "eval.jsonl"
    assert _eval(tiny_tool_model, out, CALCULATOR) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["n"] == 2 and 0.0 <= result["accuracy"] <= 1.0  # held-out success
    assert result["agent/calls_per_episode"] >= 1 and result["agent/failed_episodes"] == 0.0
    assert {f"agent/failed/{k}" for k in ("agent_raised", "timeout", "max_calls", "no_calls")} <= set(result)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2 and all(r["agent"]["calls"] >= 1 and r["agent"]["failure"] is None for r in records)


def test_grouprl_eval_with_an_agent_that_cannot_run_exits_1(tiny_tool_model, tmp_path, capsys):
    agent = tmp_path / "broken.py"
    agent.write_text("async def run(client, row, **extras):\n    raise ImportError('no module named smolagents')\n")
    assert _eval(tiny_tool_model, tmp_path / "eval.jsonl", f"{agent}:run") == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["agent/failed/agent_raised"] == 2.0  # the measures are still printed
    [line] = [x for x in captured.err.splitlines() if x.startswith("grouprl: run stopped:")]
    assert "every agent episode of the evaluation failed (agent_raised x2)" in line


def test_agent_implies_conversation_episodes_and_the_agents_context_limit():
    from grouprl.tasks import load_task

    args = build_parser().parse_args(["train", "--task", "tool_arithmetic", "--agent", CALCULATOR])
    cfg = config_from_args(args)
    assert cfg.tools.episode_mode == "conversation" and cfg.tools.max_conversation_tokens == 4096
    load_task(cfg)  # the task that needs conversation episodes accepts it
    given = config_from_args(build_parser().parse_args(["train", "--config", str(RECIPE)]))
    assert given.tools.max_conversation_tokens == 1400  # a recipe's own limit stands
    plain = config_from_args(build_parser().parse_args(["train", "--task", "tool_arithmetic"]))
    assert plain.tools.episode_mode == "window" and plain.tools.max_conversation_tokens is None
