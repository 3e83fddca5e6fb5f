"""`grouprl eval` for long evaluations and tool models: progress and tokens/s, the whole tool conversation
in the per-example file, --tool_parser and --system_prompt."""

from __future__ import annotations

import json
import string

import pytest

from grouprl import cli
from grouprl.job.evaluate import evaluate
from grouprl.models.tiny import build_tokenizer
from grouprl.rewards.scorer import Scorer
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.runner import episode_settings
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.run_config import build_config
from grouprl.tasks import load_task
from grouprl.tasks.tool_arithmetic import expert_reply
from grouprl.tools.chat_template import TOOL_CHAT_TEMPLATE


def test_a_tool_conversation_is_kept_whole_in_the_per_example_file(tmp_path):
    cfg = build_config(
        None,
        {"task": "tool_arithmetic", "episode_mode": "conversation", "n_eval": 4, "tools": ["calculator", "lookup"]},
        environ={},
    )
    task = load_task(cfg)
    tokenizer = build_tokenizer(string.printable)
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    out, seen = tmp_path / "per_example.jsonl", []
    result = evaluate(
        ScriptedBackend(tokenizer, expert_reply),
        tokenizer,
        task,
        task.eval_rows[:4],
        SamplingParams(max_new_tokens=200),
        Scorer.from_config(cfg, task),
        out,
        episode_settings(cfg, task),
        progress=lambda done, total, tokens: seen.append((done, total, tokens)),
    )
    assert result["accuracy"] == 1.0 and seen[-1][:2] == (4, 4) and seen[-1][2] > 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    for record in records:
        messages = record["messages"]
        roles = [m["role"] for m in messages]
        assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
        tools = [m for m in messages if m["role"] == "tool"]
        calls = [m for m in messages if m.get("tool_calls")]
        assert len(tools) == len(calls) == record["episode_length"] - 1 >= 1  # every call and its result
        assert all(m["error"] is None and m["content"] for m in tools)
        assert [m["content"] for m in messages if m["role"] == "assistant"][:-1] == record["actions"][:-1]
        assert messages[-1]["content"] == f"Answer: {record['ground_truth']}"
        assert record["question"] in messages[1]["content"]


def test_cli_eval_shows_progress_and_tokens_per_second_and_takes_a_system_prompt(tiny_arithmetic_dir, tmp_path, capsys):
    out = tmp_path / "per_example.jsonl"
    assert (
        cli.main(
            [
                "eval",
                "--model",
                str(tiny_arithmetic_dir),
                "--task",
                "arithmetic",
                "--n",
                "6",
                "--max_new_tokens",
                "4",
                "--device",
                "cpu",
                "--out",
                str(out),
                "--system_prompt",
                "Answer fast.",
                "--tool_parser",
                "mistral",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    result = json.loads(captured.out[captured.out.index("{") :])
    assert result["tokens_per_second"] > 0
    err = " ".join(captured.err.split())  # rich wraps long log lines
    assert "0/6 prompts" in err and "6/6 prompts" in err and "tokens/s" in err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 6 and all("Answer fast." in r["prompt"] for r in records)


def test_cli_eval_tool_parser_reaches_the_conversation_settings(tiny_arithmetic_dir, tmp_path, capsys):
    recipe = tmp_path / "tools.yaml"
    recipe.write_text(
        "task:\n  task: tool_arithmetic\ntools:\n  episode_mode: conversation\n  tools: [calculator, lookup]\n"
    )
    code = cli.main(
        [
            "eval",
            "--model",
            str(tiny_arithmetic_dir),
            "--config",
            str(recipe),
            "--n",
            "2",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "x.jsonl"),
            "--tool_parser",
            "smoke_signals",
        ]
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("grouprl: error")]
    assert code == 2 and len(errors) == 1 and "'tool_parser'" in errors[0] and "smoke_signals" in errors[0]


@pytest.mark.parametrize("flag", ["--tool_parser", "--system_prompt"])
def test_eval_help_lists_the_flags(flag, capsys):
    with pytest.raises(SystemExit):
        cli.main(["eval", "--help"])
    assert flag in capsys.readouterr().out
