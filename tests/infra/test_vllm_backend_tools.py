"""Conversation episodes on the vllm backend (vLLM's CPU build): the engine's ids and log-probs reach the
packed conversation unchanged, at the generated positions, and agree with the trainer's scoring of the one
sequence. Skipped where vLLM is not installed; CI runs it in the vllm venv (``.ci/vllm-venv``)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM not installed (pip install grouprl[vllm]; CI: .ci/vllm-venv)")

from grouprl.models.loading import load_tokenizer  # noqa: E402
from grouprl.policy.scoring import completion_logps  # noqa: E402
from grouprl.models.tiny import init_tiny  # noqa: E402
from grouprl.rollout.backends.vllm import VLLMBackend, VLLMOptions  # noqa: E402
from grouprl.rollout.conversation import ConversationSettings, run_conversation_episodes  # noqa: E402
from grouprl.rollout.generation import SamplingParams  # noqa: E402
from grouprl.tasks.tool_arithmetic import ToolArithmeticTask, rows  # noqa: E402
from grouprl.tools import resolve_tools  # noqa: E402
from grouprl.tools.chat_template import ensure_tool_template  # noqa: E402
from grouprl.train.conversation_samples import conversation_layout, pack_conversations  # noqa: E402

LOGPROB_TOL = 1e-3  # fp32 engine vs fp32 trainer (see test_vllm_backend.py)


def test_conversations_on_vllm(tmp_path):
    task = ToolArithmeticTask("tool_arithmetic", rows(2), rows(2, 1000))
    path = init_tiny(
        task.tokenizer_corpus(),
        tmp_path / "tiny",
        hidden=128,
        layers=2,
        heads=4,
        seed=0,
        max_positions=task.tiny_max_positions,
    )
    tok = load_tokenizer(str(path))
    ensure_tool_template(tok, "auto")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    engine = VLLMBackend(str(path), tok, VLLMOptions(dtype="float32", max_model_len=2048))
    settings = ConversationSettings(
        tools=resolve_tools(["calculator", "lookup"]), max_tool_calls=2, max_conversation_tokens=2048
    )
    episodes = run_conversation_episodes(
        [task.env_factory(r) for r in task.train_rows],
        task.train_rows,
        2,
        engine,
        tok,
        SamplingParams(max_new_tokens=24),
        settings,
        [r["seed"] for r in task.train_rows],
    )
    assert all(ep.conversation and ep.end_reason for ep in episodes)
    for ep in episodes:
        conversation_layout(ep)  # every turn's prompt + action is a prefix of the conversation
        for s in ep.steps:
            assert s.logprobs is not None and len(s.logprobs) == len(s.action_ids)
    n_steps = sum(len(ep.steps) for ep in episodes)
    samples = pack_conversations(episodes, torch.zeros(n_steps), tok.pad_token_id, mask_truncated=False)
    mask = samples.batch.completion_mask.bool()
    with torch.no_grad():
        trainer, _ = completion_logps(model, samples.batch)
    assert samples.sampler_logps is not None
    assert (samples.sampler_logps[mask] - trainer[mask]).abs().max() < LOGPROB_TOL
    assert (samples.sampler_logps[~mask] == 0).all()


def test_the_tool_recipe_trains_on_vllm(tmp_path):
    """``grouprl train`` on the tool recipe with ``generation_backend: vllm``: a briefly tool-SFT'd tiny model
    calls the tools on vLLM, two steps train on its conversations (one sequence each) and evaluate."""
    import json
    from pathlib import Path

    from grouprl.cli import main
    from grouprl.job.tool_sft import tool_sft
    from grouprl.rollout.runner import episode_settings
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "tiny" / "tool_arithmetic.yaml"
    cfg = build_config(recipe, {"output_dir": str(tmp_path / "sft")}, environ={})
    task = load_task(cfg)
    tiny = init_tiny(
        task.tokenizer_corpus(),
        tmp_path / "tiny",
        hidden=128,
        layers=2,
        heads=4,
        seed=0,
        tokenizer=task.tiny_tokenizer,
        max_positions=task.tiny_max_positions,
    )  # head_dim 32 for vLLM
    warm = tool_sft(
        str(tiny),
        task,
        episode_settings(cfg, task),
        tmp_path / "warm",
        steps=60,
        learning_rate=3e-3,
        batch_size=8,
        seed=0,
        n_episodes=64,
    )
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--config",
                str(recipe),
                "--model_name_or_path",
                str(warm),
                "--output_dir",
                str(out),
                "--generation_backend",
                "vllm",
                "--torch_dtype",
                "float32",
                "--max_steps",
                "2",
                "--batch_size",
                "2",
                "--num_generations",
                "2",
                "--n_eval",
                "2",
                "--seed",
                "1",
                "--device",
                "cpu",
                "--save_trajectories_every",
                "1",
            ]
        )
        == 0
    )
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["samples"] == 4 for m in metrics)  # one sequence per episode
    assert sum(m["tools/calls_per_episode"] for m in metrics) > 0, "the model never called a tool on vLLM"
    rows = [json.loads(line) for line in (out / "trajectories" / "step_000001.jsonl").read_text().splitlines()]
    assert any(r.get("tool_results") for r in rows)
    assert json.loads((out / "summary.json").read_text())["eval_after"]["n"] == 2
