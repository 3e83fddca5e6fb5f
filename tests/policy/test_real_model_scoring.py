"""Scoring on a real model (SmolLM2-135M-Instruct, 30 layers, GQA, tied 49k-token LM head, ChatML prompts):
the grouped layouts (one prompt pass per group, positions restarted) give the padded path's log-probs and
entropies to 1e-5 and its gradients to 1e-5 of their scale."""

from __future__ import annotations

import pytest
import torch

from grouprl.data.chat_format import render_prompt_ids
from grouprl.policy.grouped_scoring import grouped_completion_logps, shared_prefix_logps, supports_grouped_scoring
from grouprl.policy.scoring import completion_logps, pack
from real_model import smollm2_dir  # noqa: F401 - the session fixture


@pytest.fixture(scope="module")
def real(smollm2_dir):
    from transformers import AutoModelForCausalLM

    from grouprl.models.loading import load_tokenizer

    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32, attn_implementation="sdpa")
    return model, load_tokenizer(str(smollm2_dir))


def chat_batch(tok):
    """Two real chat prompts of different lengths, three completions each of different lengths (one cut short)."""
    end = tok.convert_tokens_to_ids("<|im_end|>")
    prompts, completions = [], []
    for question, answers in [
        ("What is 12+30?", ["42", "It is 42.", "The sum of 12 and 30 is"]),
        ("Name a colour of the sky on a clear day, please.", ["Blue.", "blue", "Sky blue"]),
    ]:
        _, prompt, _ = render_prompt_ids(tok, [{"role": "user", "content": question}])
        for k, answer in enumerate(answers):
            ids = tok(answer, add_special_tokens=False)["input_ids"]
            prompts.append(prompt)
            completions.append(ids if k == 2 else ids + [end])  # the third runs out of tokens: no end-of-turn
    return pack(prompts, completions, tok.pad_token_id)


def grads(model, scorer, batch, weights, temperature):
    model.zero_grad(set_to_none=True)
    logps, entropy = scorer(model, batch, temperature, with_entropy=True)
    (logps * weights * batch.completion_mask).sum().backward()
    return logps.detach(), entropy, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_grouped_layouts_equal_the_padded_path(real, temperature):
    model, tok = real
    assert supports_grouped_scoring(model)
    batch = chat_batch(tok)
    weights = torch.linspace(-1.0, 1.5, batch.completion_ids.numel()).view_as(batch.completion_mask)
    ref_logps, ref_entropy, ref_grads = grads(model, completion_logps, batch, weights, temperature)
    mask = batch.completion_mask.bool()
    assert ref_logps[mask].max() < 0 and len(ref_grads) == len(list(model.parameters()))
    scale = max(float(g.abs().max()) for g in ref_grads.values())
    for scorer in (grouped_completion_logps, shared_prefix_logps):
        logps, entropy, got = grads(model, scorer, batch, weights, temperature)
        # float32 through 30 layers in another summation order: 5e-5 of the value. Measured with 2026-12-02's
        # packages, deterministic per thread count: 1.08e-5 (1 thread) and 2.02e-5 (2 threads, CI's default) for
        # an entropy at temperature 0.7; the landed code of 2026-11-27 gives 1.53e-5 for a log-prob at 2 threads
        for name, got_v, ref_v in (("log-probs", logps, ref_logps), ("entropies", entropy, ref_entropy)):
            relative = ((got_v - ref_v).abs() / ref_v.abs().clamp(min=1.0))[mask]
            assert float(relative.max()) < 5e-5, f"{scorer.__name__}: {name} differ by {float(relative.max()):.2e}"
        assert float(logps[~mask].abs().max()) == 0.0
        # relative to the gradient's scale (|g| up to ~60 here): the layouts sum the same float32 terms in
        # another order (a layer norm's gradient sums over every token), which moves the last bits only
        worst = max(float((got[n] - g).abs().max()) for n, g in ref_grads.items()) / scale
        assert worst < 1e-5, f"{scorer.__name__}: gradients differ by {worst:.2e} of their scale"
