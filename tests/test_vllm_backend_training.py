"""Two GRPO steps with ``generation_backend: vllm`` on vLLM's CPU build: sampling log-probs reach the loss
(truncated importance sampling, logged), the update moves the weights and the engine holds the new ones.

Skipped where vLLM is not installed; CI runs it in the venv made by ``.ci/vllm-venv``."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM not installed (pip install grouprl[vllm]; CI: .ci/vllm-venv)")

from grouprl.config import build_config  # noqa: E402
from grouprl.policy.loading import load_policy  # noqa: E402
from grouprl.policy.scoring import completion_logps, pack  # noqa: E402
from grouprl.policy.tiny import init_tiny  # noqa: E402
from grouprl.rollout.backends.vllm import VLLMBackend  # noqa: E402
from grouprl.rollout.generation import SamplingParams  # noqa: E402
from grouprl.tasks import load_task  # noqa: E402
from grouprl.train.trainer import Trainer  # noqa: E402


def test_two_training_steps_on_the_vllm_backend(tmp_path):
    cli = {"output_dir": str(tmp_path / "run"), "batch_size": 2, "num_generations": 4, "max_new_tokens": 8,
           "generation_backend": "vllm", "vllm_max_model_len": 256, "learning_rate": 1e-2,
           "lr_scheduler_type": "constant", "rewards": ["length"], "torch_dtype": "float32", "device": "cpu",
           "n_train": 50, "n_eval": 1}
    cfg = build_config(None, cli, environ={})
    task = load_task(cfg)
    path = init_tiny(task.tokenizer_corpus(), tmp_path / "model", hidden=128, layers=2, heads=4, seed=0)  # head_dim 32
    policy = load_policy(cfg.model, str(path), torch.device("cpu"), need_reference=False)
    trainer = Trainer(cfg, policy, task)
    assert isinstance(trainer.backend, VLLMBackend)
    before = [p.detach().clone() for p in policy.model.parameters()]
    for _ in range(2):
        record = trainer.train_step()
        steps = [s for ep in record.episodes for s in ep.steps]
        assert all(s.logprobs is not None and len(s.logprobs) == len(s.action_ids) for s in steps)
        assert record.samples.sampler_logps is not None
        stats = record.update
        # fp32 engine and trainer with the same weights: pi_old / pi_sampler ~ 1 on every token
        assert 0.99 < stats["importance_sampling/ratio_mean"] < 1.01, stats
        assert stats["importance_sampling/ratio_min"] <= 1.0 <= stats["importance_sampling/ratio_max"] < 1.05
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.model.parameters())), "no update happened"

    prompts = [s.prompt_ids for s in steps[:3]]
    comps = trainer.backend.generate(prompts, SamplingParams(max_new_tokens=6))
    batch = pack(prompts, [c.ids for c in comps], policy.tokenizer.pad_token_id)
    with torch.no_grad():
        ours, _ = completion_logps(policy.model, batch)
    theirs = torch.tensor([c.logprobs + [0.0] * (ours.size(1) - len(c.ids)) for c in comps])
    m = batch.completion_mask.bool()
    assert float((ours - theirs)[m].abs().max()) < 1e-3  # the engine samples from the updated weights
