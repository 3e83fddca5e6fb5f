"""One prompt pass per group gives the padded path's log-probs, entropies and gradients (fp32, 1e-5)."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from grouprl.algos.loss import policy_loss
from grouprl.policy.grouped_scoring import (
    build_layout,
    grouped_completion_logps,
    shared_prefix_logps,
    supports_grouped_scoring,
)
from grouprl.policy.scoring import completion_logps, pack

VOCAB, PAD, EOS = 61, 0, 1


def tiny_model(attn: str = "sdpa", seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
    )
    cfg._attn_implementation = attn
    model = Qwen2ForCausalLM(cfg).float()
    with torch.no_grad():  # random init is near-uniform; spread the logits so differences would show
        for p in model.parameters():
            p.mul_(3.0)
    return model


def batch_of_groups(seed: int, groups: int = 3, k: int = 4):
    """Prompts of different lengths (left padding) and K completions of different lengths per prompt,
    some ending in eos, some not; group members are not contiguous in the batch."""
    rng = random.Random(seed)
    prompts, comps = [], []
    for _ in range(groups):
        prompt = [rng.randrange(2, VOCAB) for _ in range(rng.randint(3, 11))]
        for _ in range(k):
            c = [rng.randrange(2, VOCAB) for _ in range(rng.randint(1, 9))]
            if rng.random() < 0.5:
                c.append(EOS)
            prompts.append(prompt)
            comps.append(c)
    order = list(range(len(prompts)))
    rng.shuffle(order)
    return pack([prompts[i] for i in order], [comps[i] for i in order], PAD)


def grads_of(model, scorer, batch, advantages) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    logps, _ = scorer(model, batch, 0.7)
    loss, _ = policy_loss(logps, logps.detach() + 0.05, advantages, batch.completion_mask, loss_type="grpo")
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


SCORERS = pytest.mark.parametrize(
    "scorer", [grouped_completion_logps, shared_prefix_logps], ids=["block_mask", "prefix_cache"]
)


@SCORERS
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_logps_entropy_and_gradients_equal_padded_path(attn, scorer):
    model = tiny_model(attn)
    assert supports_grouped_scoring(model)
    batch = batch_of_groups(seed=1)
    assert (batch.prompt_mask == 0).any() and (batch.completion_mask == 0).any()
    m = batch.completion_mask.bool()
    with torch.no_grad():
        ref, ref_h = completion_logps(model, batch, 0.7, with_entropy=True)
        got, got_h = scorer(model, batch, 0.7, with_entropy=True)
    assert float((ref - got)[m].abs().max()) < 1e-5
    assert float((ref_h - got_h)[m].abs().max()) < 1e-5
    assert float(got[~m].abs().max()) == 0.0  # padding positions hold 0, not junk
    assert ref[m].std() > 0.5  # the comparison is between informative values

    adv = torch.linspace(-1, 1, len(batch))
    loss_ref, g_ref = grads_of(model, completion_logps, batch, adv)
    loss_got, g_got = grads_of(model, scorer, batch, adv)
    assert float((loss_ref - loss_got).abs()) < 1e-6
    scale = max(float(g.abs().max()) for g in g_ref.values())
    assert scale > 1e-3
    diff = max(float((g_ref[n] - g_got[n]).abs().max()) for n in g_ref)
    assert diff < 1e-5 * max(1.0, scale), f"max grad diff {diff:.2e} (max |g| {scale:.2e})"


def test_layout_one_row_per_prompt_with_restarted_positions():
    batch = pack([[5, 6, 7], [9, 9], [5, 6, 7]], [[10, 11], [12], [13, 14, 15]], PAD)
    lay = build_layout(batch)
    assert lay.input_ids.tolist() == [[5, 6, 7, 10, 11, 13, 14, 15], [9, 9, 12, 0, 0, 0, 0, 0]]
    assert lay.position_ids[0].tolist() == [0, 1, 2, 3, 4, 3, 4, 5]
    assert lay.segments.tolist() == [[0, 0, 0, 1, 1, 2, 2, 2], [0, 0, 1, -1, -1, -1, -1, -1]]
    mask = lay.attention_mask()[0, 0]
    assert mask[5].tolist() == [True, True, True, False, False, True, False, False]  # c_2 sees prompt + itself
    assert mask[4].tolist() == [True, True, True, True, True, False, False, False]
    # predictors: first token of each completion from the last prompt position (2), then the previous token
    assert lay.predictor.tolist() == [2, 3, 2, 5, 6, 8 + 1]
    assert lay.targets.tolist() == [10, 11, 13, 14, 15, 12]


@SCORERS
def test_masked_out_completions_are_skipped_and_backward_still_runs(scorer):
    model = tiny_model()
    batch = batch_of_groups(seed=2, groups=2, k=3)
    batch.completion_mask[0] = 0  # as mask_truncated_completions does
    logps, _ = scorer(model, batch)
    ref, _ = completion_logps(model, batch)
    m = batch.completion_mask.bool()
    assert float((ref - logps.detach())[m].abs().max()) < 1e-5
    assert float(logps[0].abs().max()) == 0.0
    batch.completion_mask.zero_()
    empty, _ = scorer(model, batch)
    empty.sum().backward()  # nothing to score, yet the loss stays differentiable


def test_unsupported_attention_is_reported():
    model = tiny_model()
    model.config._attn_implementation = "flash_attention_2"
    assert not supports_grouped_scoring(model)


def test_non_contiguous_mask_is_a_clear_error():
    batch = pack([[3, 4]], [[5, 6, 7]], PAD)
    batch.completion_mask[0, 1] = 0
    with pytest.raises(ValueError, match="sample 0's completion mask"):
        build_layout(batch)
    with pytest.raises(ValueError, match="sample 0's completion mask"):
        shared_prefix_logps(tiny_model(), batch)


def test_one_token_prompts_and_a_single_sample():
    # width 1: nothing to put in the cache; the segment starts at the only prompt token
    model = tiny_model()
    for batch in (pack([[7], [7], [9]], [[3, 4, EOS], [5], [6, 6]], PAD), pack([[4, 5, 6]], [[7, 8]], PAD)):
        with torch.no_grad():
            ref, _ = completion_logps(model, batch)
            got, _ = shared_prefix_logps(model, batch)
        m = batch.completion_mask.bool()
        assert float((ref - got)[m].abs().max()) < 1e-5


@SCORERS
def test_lora_policy_scores_the_same_through_the_adapters(scorer):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        tiny_model(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )  # non-zero adapters
    assert supports_grouped_scoring(model)
    batch = batch_of_groups(seed=3, groups=2, k=3)
    adv = torch.linspace(-1, 1, len(batch))
    _, g_ref = grads_of(model, completion_logps, batch, adv)
    _, g_got = grads_of(model, scorer, batch, adv)
    lora = [n for n in g_ref if "lora_" in n]
    assert lora and all(n in g_got for n in lora)
    scale = max(float(g_ref[n].abs().max()) for n in lora)
    assert max(float((g_ref[n] - g_got[n]).abs().max()) for n in lora) < 1e-5 * max(1.0, scale)


@pytest.mark.parametrize(
    "cli, expected",
    [
        ({}, "auto_grouped_logps"),
        ({"grouped_layout": "prefix_cache"}, "shared_prefix_logps"),
        ({"gradient_checkpointing": True}, "grouped_completion_logps"),  # a re-run layer cannot keep the cache
        ({"grouped_layout": "block_mask"}, "grouped_completion_logps"),
        ({"grouped_scoring": False}, "completion_logps"),
        ({"grouped_layout": "prefix_cache", "gradient_checkpointing": True}, "error"),
    ],
)
def test_the_learner_picks_the_layout(cli, expected):
    from grouprl.config import ConfigError
    from grouprl.run_config import build_config
    from grouprl.models.loading import Policy
    from grouprl.train.learner import Learner

    cfg = build_config(None, {"device": "cpu", **cli}, environ={})
    policy = Policy(model=tiny_model(), tokenizer=None, device=torch.device("cpu"))
    if expected == "error":
        with pytest.raises(ConfigError, match="grouped_layout"):
            Learner(cfg, policy)
        return
    assert Learner(cfg, policy).score_completions.__name__ == expected


def test_auto_takes_the_cheaper_layout(monkeypatch):
    import grouprl.policy.grouped_scoring as gs

    used = []
    for name in ("shared_prefix_logps", "grouped_completion_logps"):
        real = getattr(gs, name)
        monkeypatch.setattr(gs, name, lambda *a, _real=real, _name=name, **k: used.append(_name) or _real(*a, **k))
    model = tiny_model()
    rng = random.Random(0)
    prompt = [rng.randrange(2, VOCAB) for _ in range(6)]
    short = pack([prompt] * 4, [[rng.randrange(2, VOCAB) for _ in range(n)] for n in (2, 3, 3, 4)], PAD)
    long_even = pack([prompt] * 4, [[rng.randrange(2, VOCAB) for _ in range(60)] for _ in range(4)], PAD)
    uneven = pack([prompt] * 4, [[rng.randrange(2, VOCAB) for _ in range(n)] for n in (2, 3, 4, 60)], PAD)
    for batch in (short, long_even, uneven):
        with torch.no_grad():
            ref, _ = completion_logps(model, batch)
            got, _ = gs.auto_grouped_logps(model, batch)
        assert float((ref - got)[batch.completion_mask.bool()].abs().max()) < 1e-5
    # short: the one-pass block mask; long and even: the cache; one long among short ones: no padding (block)
    assert used == ["grouped_completion_logps", "shared_prefix_logps", "grouped_completion_logps"]
    block, cache = gs.layout_costs(model, long_even)
    assert cache < block


def test_auto_keeps_the_block_mask_for_short_completions_at_the_cap(monkeypatch):
    """Every completion at a short cap (the main job's replies at 12 tokens, the tiny model's at 8): by FLOPs
    alone the cache looks a few percent cheaper, but measured the block mask was 10-15 % faster there
    (docs/performance.md, "Two layouts"); the per-sample overhead term turns the estimate. Long even
    completions still go to the cache."""
    import grouprl.policy.grouped_scoring as gs

    model = tiny_model()
    rng = random.Random(1)
    prompts = [[rng.randrange(2, VOCAB) for _ in range(24)] for _ in range(4)]
    at_cap = pack(
        [p for p in prompts for _ in range(8)], [[rng.randrange(2, VOCAB) for _ in range(8)] for _ in range(32)], PAD
    )
    block, cache = gs.layout_costs(model, at_cap)
    assert block < cache
    monkeypatch.setattr(gs, "CACHE_OVERHEAD_TOKENS", 0)
    block_flops, cache_flops = gs.layout_costs(model, at_cap)
    assert cache_flops < block_flops  # what FLOPs alone said: the case the term exists for
    monkeypatch.undo()
    long_even = pack(
        [p for p in prompts for _ in range(8)], [[rng.randrange(2, VOCAB) for _ in range(120)] for _ in range(32)], PAD
    )
    block, cache = gs.layout_costs(model, long_even)
    assert cache < block
