"""Two GRPO steps with ``generation_backend: vllm`` on vLLM's CPU build: sampling log-probs reach the loss
(truncated importance sampling, logged), the update moves the weights and the engine holds the new ones.

Skipped where vLLM is not installed; CI runs it in the venv made by ``.ci/vllm-venv``."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM not installed (pip install grouprl[vllm]; CI: .ci/vllm-venv)")

from vllm_steps import TRAIN, two_steps_follow_the_trainer  # noqa: E402

from grouprl.run_config import build_config  # noqa: E402
from grouprl.models.loading import load_policy  # noqa: E402
from grouprl.models.tiny import init_tiny  # noqa: E402
from grouprl.rollout.backends.vllm import VLLMBackend  # noqa: E402
from grouprl.tasks import load_task  # noqa: E402
from grouprl.train.trainer import Trainer  # noqa: E402


def test_two_training_steps_on_the_vllm_backend(tmp_path):
    cli = dict(TRAIN, output_dir=str(tmp_path / "run"), generation_backend="vllm", vllm_max_model_len=256)
    cfg = build_config(None, cli, environ={})
    task = load_task(cfg)
    path = init_tiny(task.tokenizer_corpus(), tmp_path / "model", hidden=128, layers=2, heads=4, seed=0)  # head_dim 32
    policy = load_policy(cfg.model, str(path), torch.device("cpu"), need_reference=False)
    trainer = Trainer(cfg, policy, task)
    assert isinstance(trainer.backend, VLLMBackend)
    two_steps_follow_the_trainer(trainer, policy)


def test_lora_policy_pushes_merged_weights_the_engine_follows(tmp_path):
    # The engine serves the base architecture: the adapters go in merged (W + scale * B A), and the
    # trainer's PeftModel keeps its unmerged adapters (the two steps below train them).
    cli = dict(
        TRAIN,
        output_dir=str(tmp_path / "run"),
        generation_backend="vllm",
        vllm_max_model_len=256,
        use_peft=True,
        lora_r=4,
        lora_alpha=8,
        lora_dropout=0.0,
        lora_target_modules=["q_proj", "v_proj"],
        learning_rate=5e-2,
    )  # no dropout: the trainer's log-probs must be deterministic to compare
    cfg = build_config(None, cli, environ={})
    task = load_task(cfg)
    path = init_tiny(task.tokenizer_corpus(), tmp_path / "model", hidden=128, layers=2, heads=4, seed=0)
    policy = load_policy(cfg.model, str(path), torch.device("cpu"), need_reference=False)
    base = {n: p.detach().clone() for n, p in policy.model.named_parameters() if "base_layer" in n}
    trainer = Trainer(cfg, policy, task)
    two_steps_follow_the_trainer(trainer, policy)
    for n, p in policy.model.named_parameters():
        if n in base:
            assert torch.equal(p, base[n]), f"{n}: the base weight was left merged"
