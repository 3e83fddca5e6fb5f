"""The decode loop's behaviour log-probs (``record_logprobs``): each sampled token's log-prob under the
warped distribution it was drawn from equals re-scoring the completion with ``completion_logps`` (the
sampler's temperature and top-k/top-p support), the draws are the same with or without them, and the paths
that do not sample in the loop (greedy, ``model.generate``) leave them to the caller."""

from __future__ import annotations

import pytest
import torch

from grouprl.policy.scoring import completion_logps, pack
from grouprl.rollout.generation import HFBackend, SamplingParams
from tests.rollout.test_decode import load, prompts_of

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tiny(tiny_arithmetic_dir):
    return load(tiny_arithmetic_dir)


def _generate(model, tok, prompts, params, record: bool, prefill_once: bool = True, seed: int = 3):
    torch.manual_seed(seed)
    return HFBackend(model, tok, CPU, prefill_once, record_logprobs=record).generate(prompts, params)


@pytest.mark.parametrize("temperature, top_p, top_k", [(1.0, 1.0, 0), (0.7, 1.0, 0), (1.0, 0.8, 0), (1.3, 0.9, 7)])
def test_decode_loop_logprobs_equal_rescoring_under_the_sampler(tiny, temperature, top_p, top_k):
    model, tok = tiny
    stop = tok("1").input_ids[-1]  # an extra stop: rows leave the decode batch at different steps
    model.generation_config.eos_token_id = [tok.eos_token_id, stop]
    try:
        prompts = prompts_of(tok, [4, 3, 4, 2])
        params = SamplingParams(max_new_tokens=20, temperature=temperature, top_p=top_p, top_k=top_k, batch_size=7)
        recorded = _generate(model, tok, prompts, params, record=True)
        plain = _generate(model, tok, prompts, params, record=False)
    finally:
        model.generation_config.eos_token_id = tok.eos_token_id
    assert [c.ids for c in recorded] == [c.ids for c in plain]  # recording draws nothing
    assert all(c.logprobs is None for c in plain)
    assert len({len(c.ids) for c in recorded}) > 2  # rows ended at different steps
    support = (top_k, top_p) if top_k > 0 or top_p < 1 else None
    with torch.no_grad():
        batch = pack(prompts, [c.ids for c in recorded], tok.pad_token_id)
        rescored, _ = completion_logps(model, batch, temperature, support=support)
    for row, completion in enumerate(recorded):
        assert completion.logprobs is not None and len(completion.logprobs) == len(completion.ids)
        expected = rescored[row, : len(completion.ids)]
        assert torch.allclose(torch.tensor(completion.logprobs), expected, atol=2e-5), (row, completion.logprobs)
    if support is not None:  # the support mattered: the unrestricted log-probs are lower
        with torch.no_grad():
            whole, _ = completion_logps(model, batch, temperature)
        assert bool((rescored - whole)[batch.completion_mask.bool()].gt(1e-3).any())


def test_paths_that_do_not_sample_in_the_loop_leave_logprobs_to_the_caller(tiny):
    model, tok = tiny
    prompts = prompts_of(tok, [2, 2])
    greedy = SamplingParams(max_new_tokens=6, greedy=True)
    assert all(c.logprobs is None for c in _generate(model, tok, prompts, greedy, record=True))
    sampled = SamplingParams(max_new_tokens=6, temperature=0.9)
    assert all(c.logprobs is None for c in _generate(model, tok, prompts, sampled, record=True, prefill_once=False))
