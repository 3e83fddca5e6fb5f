"""``one_step_off`` on the colocated vLLM engine (CPU build): the producer generates with the engine's own
weights, pushed through its ``load_weights`` after each update; every step's tokens carry the version that
sampled them and the engine's log-probs, and the correction is taken against them.

Skipped where vLLM is not installed; CI runs it in the venv made by ``.ci/vllm-venv``."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM not installed (pip install grouprl[vllm]; CI: .ci/vllm-venv)")

from vllm_steps import TRAIN  # noqa: E402

from grouprl.models.loading import load_policy  # noqa: E402
from grouprl.models.tiny import init_tiny  # noqa: E402
from grouprl.rollout.backends.vllm import VLLMBackend  # noqa: E402
from grouprl.run_config import build_config  # noqa: E402
from grouprl.tasks import load_task  # noqa: E402
from grouprl.train.trainer import Trainer  # noqa: E402


def test_one_step_off_on_the_vllm_engine(tmp_path):
    cli = dict(
        TRAIN,
        output_dir=str(tmp_path / "run"),
        generation_backend="vllm",
        vllm_max_model_len=256,
        rollout_mode="one_step_off",
        vllm_sleep_during_update=False,
        rollout_timeout=300,
    )
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


def test_a_push_to_the_colocated_engine_is_staged_not_waited_for(tmp_path):
    """The learner's push returns while a generate call holds the engine (the lock held here for it); the
    call after it installs the staged weights: its tokens carry the new version and the engine's log-probs
    are the updated policy's."""
    import threading

    from grouprl.policy.scoring import completion_logps, pack
    from grouprl.rollout.backends.vllm import build_vllm_backend
    from grouprl.rollout.generation import SamplingParams
    from grouprl.rollout.weight_sync import GeneratorCopy

    cfg = build_config(
        None,
        dict(
            TRAIN,
            output_dir=str(tmp_path / "run"),
            generation_backend="vllm",
            vllm_max_model_len=256,
            vllm_sleep_during_update=False,
        ),
        environ={},
    )
    task = load_task(cfg)
    path = init_tiny(task.tokenizer_corpus(), tmp_path / "model", hidden=128, layers=2, heads=4, seed=0)
    policy = load_policy(cfg.model, str(path), torch.device("cpu"), need_reference=False)
    copy = GeneratorCopy(build_vllm_backend(policy, cfg), version=0)
    prompts = [policy.tokenizer("12+7=", add_special_tokens=False)["input_ids"]] * 2
    params = SamplingParams(max_new_tokens=6, greedy=True)

    def engine_matches_policy(completions) -> float:
        batch = pack(prompts, [c.ids for c in completions], policy.tokenizer.pad_token_id)
        with torch.no_grad():
            ours, _ = completion_logps(policy.model, batch)
        theirs = torch.tensor([c.logprobs + [0.0] * (ours.size(1) - len(c.ids)) for c in completions])
        return float((ours - theirs)[batch.completion_mask.bool()].abs().max())

    assert engine_matches_policy(copy.generate(prompts, params)) < 1e-3
    with torch.no_grad():  # an "update": every weight moves
        for p in policy.model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    pushed = threading.Event()
    with copy.lock:  # a generate call in progress
        worker = threading.Thread(target=lambda: (copy.push(policy.model, 1), pushed.set()))
        worker.start()
        assert pushed.wait(timeout=30), "the push waited for the generate call"
        assert copy.version == 0  # staged, not installed
    worker.join()
    completions = copy.generate(prompts, params)
    assert {c.policy_version for c in completions} == {1}
    assert engine_matches_policy(completions) < 1e-3  # the engine samples from the pushed weights
    assert copy.take_install_seconds() > 0
