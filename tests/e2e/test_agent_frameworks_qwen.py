"""The framework agents of ``examples/agents/frameworks/``, unchanged, one training step each on a real
tool-calling model (Qwen2.5-Coder-0.5B-Instruct, LoRA, its own chat template, ``hermes_lenient``): the step
trains, the endpoint serves every request the framework sends (nothing refused). An untrained model's mistakes
(a tool name it invents, arguments a tool rejects past the framework's retries) make some frameworks raise, as
they would in production: those episodes are counted failures, not a refused agent. ``slow`` (minutes a framework on
2 CPU cores); ``tests/e2e/test_agent_frameworks.py`` is its fast counterpart on the tiny model, in CI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grouprl.cli import main
from real_model import qwen_coder_dir  # noqa: F401 - the session fixture
from test_agent_frameworks import AGENTS, FRAMEWORKS

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "Qwen2.5-Coder-0.5B-Instruct" / "grpo"


@pytest.mark.slow
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_each_framework_trains_a_step_on_qwen_coder(qwen_coder_dir, tmp_path, agent):
    pytest.importorskip(AGENTS[agent])
    out = tmp_path / "run"
    args = [
        "train",
        "--config",
        str(RECIPE / "config_tool_arithmetic.yaml"),
        "--agent",
        f"{FRAMEWORKS / agent}",
        "--model_name_or_path",
        str(qwen_coder_dir),
        "--output_dir",
        str(out),
        "--max_steps",
        "1",
        "--batch_size",
        "1",
        "--num_generations",
        "2",
        "--max_new_tokens",
        "64",
        "--n_eval",
        "0",
        "--max_conversation_tokens",
        "4096",
        "--seed",
        "0",
        "--device",
        "cpu",
    ]
    assert main(args) == 0
    (metrics,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics["agent/calls_per_episode"] >= 1 and metrics["samples"] >= 1, metrics
    assert not any(k.startswith("agent/refused/") and v for k, v in metrics.items()), metrics
    print(agent, {k: v for k, v in metrics.items() if k.startswith(("agent/", "tools/"))})
    assert (out / "checkpoint-1" / "adapter_model.safetensors").is_file()
