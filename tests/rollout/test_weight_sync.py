"""The HF generator copy's staged push (rollout/weight_sync.py), on the tiny model with real threads: a push
returns while a generate call is in progress and the call keeps its weights; the next call installs the
latest push and says so; every version tag is the truth (the recorded log-probs are those weights'); the
turn cache drops what the old weights made; and the staleness bound holds with producer threads."""

from __future__ import annotations

import copy
import threading
import time

import pytest
import torch

from grouprl.policy.scoring import completion_logps, pack
from grouprl.rollout.generation import HFBackend, SamplingParams
from grouprl.rollout.scheduler import AsyncScheduler, Drawn
from grouprl.rollout.turn_cache import TurnCache
from grouprl.rollout.weight_sync import GeneratorCopy
from tests.rollout.test_decode import load, prompts_of

CPU = torch.device("cpu")


@pytest.fixture()
def tiny(tiny_arithmetic_dir):
    return load(tiny_arithmetic_dir)


def _perturbed(model, seed: int):
    """The learner's weights after an 'update': the same shapes, other values."""
    updated = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in updated.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=generator))
    return updated


def _logps_under(model, prompts, completions, tok, temperature=1.0):
    with torch.no_grad():
        logps, _ = completion_logps(model, pack(prompts, [c.ids for c in completions], tok.pad_token_id), temperature)
    return [logps[i, : len(c.ids)] for i, c in enumerate(completions)]


def _sampled_by(model, prompts, completions, tok) -> bool:
    return all(
        torch.allclose(torch.tensor(c.logprobs), expected, atol=1e-4)
        for c, expected in zip(completions, _logps_under(model, prompts, completions, tok))
    )


def test_a_push_returns_while_a_generate_call_is_in_progress(tiny):
    """The call is held open after its first decode step (its progress callback waits up to 10 s for the push):
    a push that waited for the call would take those 10 s; a staged one returns at once."""
    model, tok = tiny
    generator = GeneratorCopy.for_hf(HFBackend(model, tok, CPU), version=0)
    in_call, pushed = threading.Event(), threading.Event()

    def hold(*_):
        in_call.set()
        pushed.wait(10)

    prompts = prompts_of(tok, [3, 3])
    held = SamplingParams(max_new_tokens=8, temperature=1.0, progress=hold)
    out, call_seconds = [], []

    def call():
        start = time.perf_counter()
        out.extend(generator.generate(prompts, held))
        call_seconds.append(time.perf_counter() - start)

    updated = _perturbed(model, seed=1)
    thread = threading.Thread(target=call)
    thread.start()
    assert in_call.wait(30)
    push_seconds = generator.push(updated, 1)
    pushed.set()
    thread.join(30)
    assert push_seconds < 1.0 and call_seconds and push_seconds < call_seconds[0] / 5, (push_seconds, call_seconds)
    assert {c.policy_version for c in out} == {0} and _sampled_by(
        model, prompts, out, tok
    )  # the old weights, throughout
    assert generator.version == 0 and generator.installs == []  # staged, not installed yet

    torch.manual_seed(0)
    after = generator.generate(prompts, SamplingParams(max_new_tokens=8, temperature=1.0))
    assert {c.policy_version for c in after} == {1} and _sampled_by(updated, prompts, after, tok)
    assert not _sampled_by(model, prompts, after, tok)
    assert len(generator.installs) == 1 and generator.take_install_seconds() == pytest.approx(generator.installs[0])
    assert generator.take_install_seconds() == 0.0  # read once
    assert all(
        torch.equal(a, b) for a, b in zip(generator.own_model.state_dict().values(), updated.state_dict().values())
    )
    assert generator.trainer_backend.model is model and not torch.equal(  # the learner's model is not touched
        next(model.parameters()), next(updated.parameters())
    )


def test_the_latest_of_two_pushes_between_calls_is_installed_with_its_version(tiny):
    model, tok = tiny
    generator = GeneratorCopy.for_hf(HFBackend(model, tok, CPU), version=3)
    first, second = _perturbed(model, seed=1), _perturbed(model, seed=2)
    generator.push(first, 4)
    generator.push(second, 5)
    prompts = prompts_of(tok, [2, 2])
    out = generator.generate(prompts, SamplingParams(max_new_tokens=6, temperature=1.0))
    assert {c.policy_version for c in out} == {5} and _sampled_by(second, prompts, out, tok)
    assert len(generator.pushes) == 2 and len(generator.installs) == 1
    with pytest.raises(ValueError, match="state-dict entries"):
        generator.push(torch.nn.Linear(2, 2), 6)


def test_a_fallback_call_rescores_with_the_installed_weights(tiny):
    """greedy goes through no sampling in the loop: the copy scores its completions itself, after the install."""
    model, tok = tiny
    generator = GeneratorCopy.for_hf(HFBackend(model, tok, CPU), version=0)
    updated = _perturbed(model, seed=4)
    generator.push(updated, 1)
    prompts = prompts_of(tok, [1, 1, 1])
    out = generator.generate(prompts, SamplingParams(max_new_tokens=5, greedy=True))
    assert {c.policy_version for c in out} == {1} and _sampled_by(updated, prompts, out, tok)


def test_the_turn_cache_drops_what_the_old_weights_made(tiny):
    model, tok = tiny
    generator = GeneratorCopy.for_hf(HFBackend(model, tok, CPU, turn_cache=TurnCache()), version=0)
    cache = generator.backend.turn_cache
    params = SamplingParams(max_new_tokens=4, temperature=1.0)
    prompt = prompts_of(tok, [1])[0]
    (turn1,) = generator.generate([prompt], params)
    (turn2,) = generator.generate([prompt + turn1.ids + tok(" ok ").input_ids], params)
    assert cache.stats.reused_tokens > 0  # same weights: the conversation's keys and values are read back
    reused = cache.stats.reused_tokens
    generator.push(_perturbed(model, seed=5), 1)
    (turn3,) = generator.generate(
        [prompt + turn1.ids + tok(" ok ").input_ids + turn2.ids + tok(" go ").input_ids], params
    )
    assert cache.stats.reused_tokens == reused and turn3.policy_version == 1  # re-encoded with the new weights
    assert (turn1.policy_version, turn2.policy_version) == (0, 0)


def test_producer_threads_keep_the_staleness_bound_and_true_version_tags(tiny):
    """Two producers generate with the tiny model while the learner 'updates' and pushes after each batch:
    every batch is within max_staleness of the learner, and its recorded log-probs are those of the weights
    its version names (a tag that lied about an install would fail here)."""
    model, tok = tiny
    generator = GeneratorCopy.for_hf(HFBackend(model, tok, CPU), version=0)
    weights = {0: model}
    prompts = prompts_of(tok, [2, 2])

    def draw(index: int) -> Drawn:
        return Drawn([{"i": index}], index, index + 1)

    def produce(drawn, backend):
        out = backend.generate(prompts, SamplingParams(max_new_tokens=6, temperature=1.0))
        return out, None, {"generation_time": 0.0}

    scheduler = AsyncScheduler(draw, produce, generator, max_staleness=1, workers=2, timeout=60.0, position=0)
    try:
        for step in range(5):
            batch = scheduler.next_batch(step)
            (version,) = {c.policy_version for c in batch.episodes}
            assert 0 <= step - version <= 1 and _sampled_by(weights[version], prompts, batch.episodes, tok)
            assert batch.producer_seconds["weight_install_time"] >= 0
            weights[step + 1] = _perturbed(model, seed=10 + step)
            assert generator.push(weights[step + 1], step + 1) < 1.0
    finally:
        scheduler.close()
    assert len(generator.installs) >= 3  # the producers picked the pushes up as they went
