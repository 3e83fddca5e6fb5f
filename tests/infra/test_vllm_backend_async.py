"""``one_step_off`` on the colocated vLLM engine (CPU build): the producer generates with the engine's own
weights, pushed through its ``load_weights`` after each update; every step's tokens carry the version that
sampled them and the engine's log-probs, and the correction is taken against them.

Skipped where vLLM is not installed; CI runs it in the venv made by ``.ci/vllm-venv``."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM not installed (pip install grouprl[vllm]; CI: .ci/vllm-venv)")

from vllm_steps import TRAIN  # noqa: E402

from grouprl.policy.loading import load_policy  # noqa: E402
from grouprl.policy.tiny import init_tiny  # noqa: E402
from grouprl.rollout.backends.vllm import VLLMBackend  # noqa: E402
from grouprl.run_config import build_config  # noqa: E402
from grouprl.tasks import load_task  # noqa: E402
from grouprl.train.trainer import Trainer  # noqa: E402


def test_one_step_off_on_the_vllm_engine(tmp_path):
    cli = dict(TRAIN, output_dir=str(tmp_path / "run"), generation_backend="vllm", vllm_max_model_len=256,
               rollout_mode="one_step_off", vllm_sleep_during_update=False, rollout_timeout=300)
    cfg = build_config(None, cli, environ={})
    task = load_task(cfg)
    path = init_tiny(task.tokenizer_corpus(), tmp_path / "model", hidden=128, layers=2, heads=4, seed=0)
    policy = load_policy(cfg.model, str(path), torch.device("cpu"), need_reference=False)
    trainer = Trainer(cfg, policy, task)
    assert isinstance(trainer.backend, VLLMBackend)
    try:
        for step in range(3):
            record = trainer.train_step()
            trainer.step += 1
            steps = [s for ep in record.episodes for s in ep.steps]
            assert all(s.logprobs is not None and len(s.logprobs) == len(s.action_ids) for s in steps)
            assert all(0 <= step - s.policy_version <= 1 for s in steps)
            assert "importance_sampling/ratio_mean" in record.update and record.update["async/weight_sync_time"] > 0
            assert record.rollout_stats["async/staleness_max"] <= 1
        assert trainer._scheduler.evaluation_backend is trainer._scheduler.generator  # evaluation takes the lock
    finally:
        trainer.close()
