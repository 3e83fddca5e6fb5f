"""bench/vs_trl/tools.py, the tool config of bench/vs_trl/compare.py: grouprl and TRL's GRPOTrainer do the same
multi-turn tool-calling work. At toy size (a briefly tool-SFT'd tiny model, 2 questions x 2 conversations,
greedy so that both sides play the same conversations) each side runs one training step in its own process,
and the conversations, turns, tool calls executed, tokens and generated tokens agree exactly, conversation by
conversation; TRL renders the very prompt grouprl renders (same tools, same schemas, same template)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="TRL not installed (the benchmark's other side)")

from bench.common import child_pythonpath
from bench.vs_trl import tools as vs_trl_tools


@pytest.fixture(scope="module")
def warm_tool_model(tmp_path_factory) -> str:
    import argparse

    args = argparse.Namespace(seed=0, sft_steps=60, steps=1, threads=1, lr=1e-6, no_grouped=False)
    return vs_trl_tools.build_tool_model(args, tmp_path_factory.mktemp("tool_model"))


def run_worker(which: str, model: str, out: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPRL_")}
    env.update(
        PYTHONPATH=child_pythonpath(keep_caller=False),
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        TRL_EXPERIMENTAL_SILENCE="1",
    )
    result = out / f"{which}.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.vs_trl.tools",
            "--which",
            which,
            "--model",
            model,
            "--result-file",
            str(result),
            "--steps",
            "1",
            "--prompts",
            "2",
            "--k",
            "2",
            "--n-train",
            "2",
            "--top-k",
            "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(result.read_text())


def test_trl_renders_the_prompt_grouprl_renders(warm_tool_model):
    from grouprl.models.loading import load_tokenizer
    from grouprl.rollout.conversation import ConversationSettings, initial_prompt
    from grouprl.tasks.tool_arithmetic import ToolArithmeticTask, rows
    from grouprl.tools import resolve_tools
    from grouprl.tools.chat_template import ensure_tool_template

    tok = load_tokenizer(warm_tool_model)
    ensure_tool_template(tok, "auto")
    settings = ConversationSettings(tools=resolve_tools(["calculator", "lookup"]))
    task = ToolArithmeticTask("tool_arithmetic", rows(2), [])
    for row in task.train_rows:
        messages = task.env_factory(row)().reset().messages
        _, grouprl_ids = initial_prompt(tok, messages, settings)
        trl_ids = tok.apply_chat_template(
            messages, tools=vs_trl_tools.trl_tools(), add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
        assert trl_ids == grouprl_ids
    assert [t("6 * 7") for t in vs_trl_tools.trl_tools()[:1]] == ["42"]  # the very tool, the same result


def test_both_sides_do_the_same_work(warm_tool_model, tmp_path):
    grouprl, trl = (run_worker(w, warm_tool_model, tmp_path) for w in ("grouprl", "trl"))
    for key in ("conversations", "turns", "tool_calls", "tokens", "completion_tokens", "conversation_tokens"):
        assert grouprl[key] == trl[key], f"{key}: grouprl {grouprl[key]} vs TRL {trl[key]}"
    assert grouprl["conversations"] == [4]
    assert grouprl["tool_calls"][0] > 0, "the warm model called no tool: the check would compare single turns"
    assert grouprl["turns"][0] > grouprl["conversations"][0]  # multi-turn conversations
    assert grouprl["truncated_turns"] == [0] and grouprl["ended_by_cap"] == [0]  # no cap whose semantics differ
    for side in (grouprl, trl):
        assert len(side["step_times"]) == 1 and side["peak_rss_mb"] > 0
