"""Two GRPO steps on an engine backend that reports sampling log-probs (vllm, vllm_server), with the checks
both vLLM training tests make: log-probs reach the loss, pi_old / pi_sampler ~ 1, the weights move, and the
engine then samples from the updated weights."""

from __future__ import annotations

import time

import torch

from grouprl.policy.scoring import completion_logps, pack
from grouprl.rollout.generation import SamplingParams

TRAIN = {
    "batch_size": 2,
    "num_generations": 4,
    "max_new_tokens": 8,
    "learning_rate": 1e-2,
    "lr_scheduler_type": "constant",
    "rewards": ["length"],
    "torch_dtype": "float32",
    "device": "cpu",
    "n_train": 50,
    "n_eval": 1,
}  # the config of both tests' runs (plus output_dir and the backend)


def two_steps_follow_the_trainer(trainer, policy) -> None:
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


def wait_until_served(proc, client, log, seconds: float = 180.0) -> None:
    """Poll a started ``grouprl vllm-serve`` process's /health until it answers; its log's tail if it exits or
    does not answer in ``seconds``."""
    from grouprl.rollout.backends.vllm_client import VLLMServerError

    deadline = time.monotonic() + seconds
    while True:
        assert proc.poll() is None, f"vllm-serve exited {proc.returncode}:\n{log.read_text()[-3000:]}"
        try:
            client.wait_until_ready(1.0)
            return
        except VLLMServerError:
            assert time.monotonic() < deadline, f"no /health within {seconds:g} s:\n{log.read_text()[-3000:]}"
