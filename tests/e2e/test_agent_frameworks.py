"""Agents written the way each framework's docs teach them train unchanged through ``grouprl train --agent``.

LangGraph's prebuilt ReAct agent on ``ChatOpenAI`` (invoke and ``astream``), the OpenAI Agents SDK (its default
Responses model, the Chat Completions model, ``Runner.run_streamed``), pydantic-ai (``run`` and ``run_stream``),
smolagents' ``ToolCallingAgent`` and ``CodeAgent`` (which send ``stop`` and ``tool_choice: required``) and a
streamed ``openai`` SDK loop: the real packages (the test extras install them), the files in
``examples/agents/frameworks/``, two training steps each on an untrained tiny model with a printable-character
vocabulary (the frameworks' own system prompts render in it), and not one failed episode. A second test drives
the same files with a scripted solver behind the same endpoint: every episode solved, its calls merged.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grouprl.cli import main

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = ROOT / "examples" / "agents" / "frameworks"
AGENTS = {  # file:function -> the package it needs
    "langgraph_react.py:run": "langgraph",
    "langgraph_react.py:run_streaming": "langgraph",
    "openai_agents_sdk.py:run": "agents",
    "openai_agents_sdk.py:run_chat": "agents",
    "openai_agents_sdk.py:run_streamed": "agents",
    "pydantic_ai_agent.py:run": "pydantic_ai",
    "pydantic_ai_agent.py:run_streaming": "pydantic_ai",
    "smolagents_agents.py:run_tool_calling": "smolagents",
    "smolagents_agents.py:run_code": "smolagents",
    "openai_streaming.py:run": "openai",
}


@pytest.fixture(scope="module")
def printable_tiny(tmp_path_factory) -> Path:
    from grouprl.cli.agent_check import tiny_chat_model  # the model `grouprl agent check` plays with

    return tiny_chat_model(tmp_path_factory.mktemp("fw"))


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_each_framework_trains_two_steps_without_a_failed_episode(printable_tiny, tmp_path, agent):
    pytest.importorskip(AGENTS[agent])
    out = tmp_path / "run"
    args = [
        "train",
        "--task",
        "tool_arithmetic",
        "--agent",
        f"{FRAMEWORKS / agent}",
        "--model_name_or_path",
        str(printable_tiny),
        "--output_dir",
        str(out),
        "--max_steps",
        "2",
        "--batch_size",
        "1",
        "--num_generations",
        "2",
        "--max_new_tokens",
        "16",
        "--n_eval",
        "0",
        "--device",
        "cpu",
        "--logging_steps",
        "1",
        "--max_conversation_tokens",
        "12000",
        "--seed",
        "1",
    ]
    assert main(args) == 0
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert m["agent/failed_episodes"] == 0 and m["agent/calls_per_episode"] >= 1, m
        assert m["samples"] >= 2 and not any(k.startswith("agent/refused/") and v for k, v in m.items()), m


@pytest.mark.parametrize("agent", sorted(a for a in AGENTS if not a.startswith("smolagents")))
def test_each_framework_solves_with_a_scripted_solver_behind_the_endpoint(tokenizer, agent):
    """The scripted solver answers as a trained model would (hermes calls, then ``Answer: n``): every framework's
    episode is solved and its calls chain into one merged sample. smolagents, whose loop ends only on its own
    ``final_answer`` tool, is left to the training test above."""
    pytest.importorskip(AGENTS[agent])
    from grouprl.rollout.agent.runner import AgentSettings, agent_metrics, run_agent_episodes
    from grouprl.rollout.generation import SamplingParams
    from grouprl.rollout.scripted import ScriptedBackend
    from grouprl.tasks.tool_arithmetic import ToolAnswerEnv, expert_reply, rows
    from grouprl.user_code import import_callable

    task_rows = rows(2)
    episodes = run_agent_episodes(
        [lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows],
        task_rows,
        2,
        ScriptedBackend(tokenizer, expert_reply),
        tokenizer,
        SamplingParams(max_new_tokens=200),
        AgentSettings(agent=import_callable(f"{FRAMEWORKS / agent}", "agent"), episode_timeout=120),
        [r["seed"] for r in task_rows],
    )
    assert all(ep.agent.failure is None and ep.success for ep in episodes), [ep.agent for ep in episodes]
    metrics = agent_metrics(episodes)
    assert metrics["agent/merged_episodes"] == 1.0 and metrics["agent/calls_per_episode"] == 2.5
