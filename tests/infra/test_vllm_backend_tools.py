"""Conversation episodes on the vllm backend (vLLM's CPU build): the engine's ids and log-probs reach the
packed conversation unchanged, at the generated positions, and agree with the trainer's scoring of the one
sequence. Skipped where vLLM is not installed; CI runs it in the vllm venv (``.ci/vllm-venv``)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM not installed (pip install grouprl[vllm]; CI: .ci/vllm-venv)")

from grouprl.policy.loading import load_tokenizer  # noqa: E402
from grouprl.policy.scoring import completion_logps  # noqa: E402
from grouprl.policy.tiny import init_tiny  # noqa: E402
from grouprl.rollout.backends.vllm import VLLMBackend, VLLMOptions  # noqa: E402
from grouprl.rollout.conversation import ConversationSettings, run_conversations  # noqa: E402
from grouprl.rollout.generation import SamplingParams  # noqa: E402
from grouprl.tasks.tool_arithmetic import ToolArithmeticTask, rows  # noqa: E402
from grouprl.tools import resolve_tools  # noqa: E402
from grouprl.tools.chat_template import ensure_tool_template  # noqa: E402
from grouprl.train.conversation_samples import conversation_layout, pack_conversations  # noqa: E402

LOGPROB_TOL = 1e-3  # fp32 engine vs fp32 trainer (see test_vllm_backend.py)


def test_conversations_on_vllm(tmp_path):
    task = ToolArithmeticTask("tool_arithmetic", rows(2), rows(2, 1000))
    path = init_tiny(task.tokenizer_corpus(), tmp_path / "tiny", hidden=128, layers=2, heads=4, seed=0,
                     max_positions=task.tiny_max_positions)
    tok = load_tokenizer(str(path))
    ensure_tool_template(tok, "auto")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    engine = VLLMBackend(str(path), tok, VLLMOptions(dtype="float32", max_model_len=2048))
    settings = ConversationSettings(tools=resolve_tools(["calculator", "lookup"]), max_tool_calls=2,
                                    max_conversation_tokens=2048)
    episodes = run_conversations([task.env_factory(r) for r in task.train_rows], task.train_rows, 2, engine, tok,
                                 SamplingParams(max_new_tokens=24), settings, [r["seed"] for r in task.train_rows])
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
