"""top-k / top-p scoring: every scorer renormalises over the same kept support, with equal gradients."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from grouprl.policy.grouped_scoring import grouped_completion_logps, shared_prefix_logps
from grouprl.policy.scoring import completion_logps, pack


def tiny_model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=41,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        pad_token_id=0,
    )
    cfg._attn_implementation = "sdpa"
    model = Qwen2ForCausalLM(cfg).float()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)  # spread the logits so that top-p cuts something
    return model


@pytest.mark.parametrize("scorer", [grouped_completion_logps, shared_prefix_logps], ids=["block_mask", "prefix_cache"])
def test_scorers_agree_on_the_truncated_support(scorer):
    model = tiny_model()
    prompts = [[5, 6, 7]] * 3 + [[9, 3]] * 3
    completions = [[8, 2, 4], [8], [11, 12, 13, 14], [3, 3], [20, 21], [7]]
    batch = pack(prompts, completions, 0)
    support = (8, 0.9)
    full, _ = completion_logps(model, batch, 0.7)
    ours, _ = completion_logps(model, batch, 0.7, support=support)
    m = batch.completion_mask.bool()
    # renormalised over a kept mass S <= 1: log pi_S = log pi - log S >= log pi, and strictly somewhere
    assert bool((ours[m] >= full[m] - 1e-6).all()) and float((ours - full)[m].max()) > 0.01
    assert bool(torch.isfinite(ours[m]).all())
    grads = []
    for fn in (completion_logps, scorer):
        model.zero_grad(set_to_none=True)
        logps, entropy = fn(model, batch, 0.7, with_entropy="grad", support=support)
        torch.testing.assert_close(logps[m], ours[m], rtol=1e-5, atol=1e-5)
        ((logps * m).sum() + (entropy * m).sum()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-4, atol=1e-5)
    assert not math.isnan(sum(float(g.abs().sum()) for g in grads[1].values()))
