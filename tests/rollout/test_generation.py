"""HF generation prefills a group's prompt once and forks its KV cache (``prefill_once``).

The claim is "the same computation, less work": the same tokens as HF ``generate`` on K padded
copies, while the model embeds each distinct prompt once.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from grouprl.models.loading import load_tokenizer
from grouprl.rollout.generation import HFBackend, SamplingParams


def grouped_prompts(tokenizer, k_per_prompt):
    """Prompts of different lengths (left padding differs), each repeated K times (K may differ)."""
    texts = ["What is 3 + 4?", "What is 12 * 11? Answer with digits only.", "7 - 2?", "What is 100 + 250?"]
    out = []
    for text, k in zip(texts, k_per_prompt):
        out += [tokenizer(text).input_ids] * k
    return out


def load(model_dir):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir).float().eval()
    with torch.no_grad():  # an untrained tiny model is near-uniform: spread its logits so a difference would show
        for p in model.parameters():
            p.mul_(2.0)
    return model, load_tokenizer(str(model_dir))


def run(model, tokenizer, prompts, params, prefill_once, seed=1):
    torch.manual_seed(seed)
    # multinomial: generate's own draws (the default inverse_cdf draws the same distribution, other tokens)
    backend = HFBackend(model, tokenizer, torch.device("cpu"), prefill_once, draw_with="multinomial")
    return backend.generate(prompts, params)


def test_greedy_completions_equal_the_padded_generate(tiny_arithmetic_dir):
    model, tok = load(tiny_arithmetic_dir)
    prompts = grouped_prompts(tok, [4, 3, 1, 5])
    params = SamplingParams(max_new_tokens=12, greedy=True, batch_size=64)
    shared, padded = run(model, tok, prompts, params, True), run(model, tok, prompts, params, False)
    assert [c.ids for c in shared] == [c.ids for c in padded]
    assert [c.truncated for c in shared] == [c.truncated for c in padded]
    assert len({tuple(c.ids) for c in shared}) > 1  # the prompts lead to different completions


def test_sampled_completions_follow_the_same_random_draws(tiny_arithmetic_dir):
    # The sampler draws the same uniforms in the same order; only float rounding of the prefill
    # (a batch of 4 instead of 16) could move a draw across a token boundary, hence "nearly all".
    model, tok = load(tiny_arithmetic_dir)
    prompts = grouped_prompts(tok, [4, 4, 4, 4])
    params = SamplingParams(max_new_tokens=12, temperature=1.0, batch_size=64)
    shared, padded = run(model, tok, prompts, params, True), run(model, tok, prompts, params, False)
    same = sum(a.ids == b.ids for a, b in zip(shared, padded))
    assert same >= 0.9 * len(prompts)
    assert len({tuple(c.ids) for c in shared[:4]}) > 1  # a group's samples differ: the cache was forked, not tied


def test_each_distinct_prompt_is_embedded_once(tiny_arithmetic_dir):
    model, tok = load(tiny_arithmetic_dir)
    prompts = grouped_prompts(tok, [8, 8, 8, 8])
    params = SamplingParams(max_new_tokens=1, greedy=True, batch_size=64)  # one new token: only the prompt pass
    embedded = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: embedded.append(args[0].numel()))
    try:
        run(model, tok, prompts, params, False)
        padded = sum(embedded)
        embedded.clear()
        run(model, tok, prompts, params, True)
        shared = sum(embedded)
    finally:
        hook.remove()
    width = max(len(p) for p in prompts)
    assert padded == 32 * width  # HF generate: every copy, padded
    assert shared == 4 * (width - 1) + 32  # distinct prompts once, then each copy's last token


def test_chunks_that_split_a_group_and_prompts_without_copies(tiny_arithmetic_dir):
    model, tok = load(tiny_arithmetic_dir)
    prompts = grouped_prompts(tok, [3, 3, 1, 3])
    params = SamplingParams(max_new_tokens=8, greedy=True, batch_size=4)  # chunks of 4 cut through groups
    assert [c.ids for c in run(model, tok, prompts, params, True)] == [
        c.ids for c in run(model, tok, prompts, params, False)
    ]
    single = grouped_prompts(tok, [1, 1, 1, 1])  # nothing to share: the plain path
    assert [c.ids for c in run(model, tok, single, params, True)] == [
        c.ids for c in run(model, tok, single, params, False)
    ]


def test_lora_policy_generates_the_same_through_the_adapters(tiny_arithmetic_dir):
    from peft import LoraConfig, get_peft_model

    base, tok = load(tiny_arithmetic_dir)
    model = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    ).eval()
    prompts = grouped_prompts(tok, [4, 2, 3, 2])
    params = SamplingParams(max_new_tokens=10, greedy=True, batch_size=64)
    assert [c.ids for c in run(model, tok, prompts, params, True)] == [
        c.ids for c in run(model, tok, prompts, params, False)
    ]
