"""grouprl's decode loop (rollout/decode.py) samples as HF ``generate`` does, with less work.

The reference is ``model.generate`` itself on the left-padded chunk (``prefill_once=False`` keeps it): greedy
completions token-identical, sampled ones with the ``multinomial`` draw identical under the same seed (the loop
draws on the whole chunk's shape, so a row leaving the batch does not move the others' draws), stops
honoured; the default ``inverse_cdf`` draw samples the same distribution (a chi-square test against the
warped probabilities); and the work saved is counted (the common prefix and each distinct prompt embedded
once, finished rows out of the batch).
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from grouprl.models.loading import load_tokenizer
from grouprl.rollout.decode import common_prefix_length, decode, draw_inverse_cdf, sampling_warpers
from grouprl.rollout.generation import HFBackend, SamplingParams, stop_token_ids

PREFIX = "Solve. Reply with digits. "


def prompts_of(tokenizer, copies: list[int], prefix: str = PREFIX) -> list[list[int]]:
    """Distinct prompts that share a prefix, of different lengths, each repeated K times."""
    texts = ["3 + 4?", "12 * 11? Answer with digits only.", "7 - 2?", "100 + 250 + 1?", "9?"]
    out = []
    for text, k in zip(texts, copies):
        out += [tokenizer(prefix + text).input_ids] * k
    return out


def load(model_dir, scale: float = 4.0):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir).float().eval()
    with (
        torch.no_grad()
    ):  # an untrained tiny model is near-uniform: spread its logits so prompts lead to different tokens
        for p in model.parameters():
            p.mul_(scale)
    return model, load_tokenizer(str(model_dir))


def run(model, tokenizer, prompts, params, fast: bool, seed: int = 1, draw_with: str = "multinomial"):
    torch.manual_seed(seed)
    backend = HFBackend(model, tokenizer, torch.device("cpu"), prefill_once=fast, draw_with=draw_with)
    return backend.generate(prompts, params)


@pytest.fixture(scope="module")
def tiny(tiny_arithmetic_dir):
    return load(tiny_arithmetic_dir)


def test_greedy_is_token_identical_to_generate(tiny):
    model, tok = tiny
    prompts = prompts_of(tok, [4, 1, 3, 5, 2])
    params = SamplingParams(max_new_tokens=16, greedy=True, batch_size=64)
    assert sampling_warpers(model, params) == []  # the loop runs (greedy: no warper)
    ours, reference = run(model, tok, prompts, params, True), run(model, tok, prompts, params, False)
    assert [c.ids for c in ours] == [c.ids for c in reference]
    assert [c.truncated for c in ours] == [c.truncated for c in reference]
    assert [c.text for c in ours] == [c.text for c in reference]
    assert len({tuple(c.ids) for c in ours}) > 1


@pytest.mark.parametrize("temperature, top_p, top_k", [(1.0, 1.0, 0), (0.7, 0.9, 0), (1.3, 1.0, 7), (0.8, 0.8, 20)])
def test_sampling_makes_generates_draws_while_rows_leave_the_batch(tiny, temperature, top_p, top_k):
    model, tok = tiny
    stop = tok("1").input_ids[-1]  # a frequent character as an extra stop: rows end at different steps
    model.generation_config.eos_token_id = [tok.eos_token_id, stop]
    try:
        prompts = prompts_of(tok, [8, 8, 4, 6, 3])
        params = SamplingParams(max_new_tokens=24, temperature=temperature, top_p=top_p, top_k=top_k, batch_size=64)
        for seed in (1, 2):
            ours, reference = (
                run(model, tok, prompts, params, True, seed),
                run(model, tok, prompts, params, False, seed),
            )
            assert [c.ids for c in ours] == [c.ids for c in reference]
            assert [c.truncated for c in ours] == [c.truncated for c in reference]
        lengths = {len(c.ids) for c in ours}
        assert len(lengths) > 2 and any(not c.truncated for c in ours)  # rows left the batch early
        assert all(not (set(c.ids[:-1]) & {tok.eos_token_id, stop}) for c in ours)  # nothing after a stop
        assert all((c.ids[-1] in (tok.eos_token_id, stop)) != c.truncated for c in ours)
    finally:
        model.generation_config.eos_token_id = tok.eos_token_id


def test_chunks_one_token_prompts_and_prompts_with_nothing_in_common(tiny):
    model, tok = tiny
    params = SamplingParams(max_new_tokens=8, greedy=True, batch_size=5)  # chunks cut through groups
    cases = [
        prompts_of(tok, [3, 3, 1, 3]),
        prompts_of(tok, [1, 1, 1, 1], prefix=""),
        [tok("1").input_ids[-1:], tok("2").input_ids[-1:]] * 3,
        [tok("7 + 8").input_ids],
    ]
    for prompts in cases:
        assert [c.ids for c in run(model, tok, prompts, params, True)] == [
            c.ids for c in run(model, tok, prompts, params, False)
        ]


def test_the_common_prefix_and_each_distinct_prompt_are_embedded_once(tiny):
    model, tok = tiny
    prompts = prompts_of(tok, [8, 8, 8, 8])
    p = common_prefix_length(prompts)
    assert p >= len(tok(PREFIX).input_ids) - 1
    params = SamplingParams(max_new_tokens=1, greedy=True, batch_size=64)  # one new token: the prompt pass
    embedded: list[tuple[int, ...]] = []
    hook = model.get_input_embeddings().register_forward_hook(
        lambda m, args, out: embedded.append(tuple(args[0].shape))
    )
    try:
        run(model, tok, prompts, params, True)
    finally:
        hook.remove()
    tails = sorted({len(q) - p - 1 for q in prompts})
    assert embedded == [(1, p), (4, tails[-1]), (32, 1)]  # prefix once, 4 distinct remainders, each copy's last token


def test_finished_rows_leave_the_decode_batch_and_progress_is_reported_per_step(tiny):
    model, tok = tiny
    stop = tok("1").input_ids[-1]
    model.generation_config.eos_token_id = [tok.eos_token_id, stop]
    try:
        prompts = prompts_of(tok, [8, 8])
        seen: list[tuple[int, int, int]] = []
        params = SamplingParams(max_new_tokens=24, temperature=1.0, batch_size=64, progress=lambda *a: seen.append(a))
        rows: list[int] = []
        hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: rows.append(args[0].shape[0]))
        try:
            completions = run(model, tok, prompts, params, True)
        finally:
            hook.remove()
    finally:
        model.generation_config.eos_token_id = tok.eos_token_id
    decode_rows = rows[2:]  # after the prefix and the distinct remainders
    assert decode_rows[0] == 16 and decode_rows == sorted(decode_rows, reverse=True) and decode_rows[-1] < 16
    assert sum(decode_rows) == sum(len(c.ids) for c in completions)  # one forward row per generated token
    assert len(seen) == len(decode_rows) and [s[1] for s in seen] == [16] * len(seen)
    assert seen[-1] == (16, 16, sum(len(c.ids) for c in completions))
    assert [s[0] for s in seen] == sorted(s[0] for s in seen)


def test_a_generation_config_the_loop_does_not_implement_keeps_generate(tiny):
    model, tok = tiny
    params = SamplingParams(max_new_tokens=10, temperature=1.0, batch_size=64)
    before = model.generation_config.repetition_penalty
    model.generation_config.repetition_penalty = 1.0  # the neutral value (hub configs write it): the loop runs
    assert sampling_warpers(model, params) == []
    model.generation_config.repetition_penalty = 1.5
    try:
        assert sampling_warpers(model, params) is None
        prompts = prompts_of(tok, [4, 4])
        assert [c.ids for c in run(model, tok, prompts, params, True)] == [
            c.ids for c in run(model, tok, prompts, params, False)
        ]
    finally:
        model.generation_config.repetition_penalty = before
    assert stop_token_ids(tok, model) == [tok.eos_token_id]


def test_lora_policy_decodes_the_same_through_the_adapters(tiny_arithmetic_dir):
    from peft import LoraConfig, get_peft_model

    base, tok = load(tiny_arithmetic_dir)
    model = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    ).eval()
    prompts = prompts_of(tok, [4, 2, 3, 2])
    for params in (SamplingParams(max_new_tokens=10, greedy=True), SamplingParams(max_new_tokens=10, temperature=0.9)):
        assert [c.ids for c in run(model, tok, prompts, params, True)] == [
            c.ids for c in run(model, tok, prompts, params, False)
        ]


def test_progress_counts_rows_and_tokens_across_chunks(tiny):
    model, tok = tiny
    seen: list[tuple[int, int, int]] = []
    params = SamplingParams(max_new_tokens=6, greedy=True, batch_size=6, progress=lambda *a: seen.append(a))
    completions = run(model, tok, prompts_of(tok, [4, 4, 4, 4]), params, True)  # chunks of 6, 6 and 4
    assert seen[-1] == (16, 16, sum(len(c.ids) for c in completions))
    assert [s[0] for s in seen] == sorted(s[0] for s in seen) and [s[2] for s in seen] == sorted(s[2] for s in seen)
    assert {s[0] for s in seen} >= {6, 12}  # each chunk's rows counted on top of the earlier chunks'


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic of observed ``counts`` against ``probs`` (entries with probability > 0), and its
    degrees of freedom."""
    keep = probs > 0
    expected = probs[keep] * counts.sum()
    return float(((counts[keep] - expected) ** 2 / expected).sum()), int(keep.sum()) - 1


def test_inverse_cdf_draws_each_entry_with_its_probability_and_never_a_zeroed_one():
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(60) * 2, dim=0)
    probs[torch.randperm(60)[:20]] = 0.0  # entries top-k / top-p removed, the last one among them
    probs[-1] = 0.0
    probs[3] = 1e-4  # a rare one
    probs = probs / probs.sum()
    n = 400_000
    drawn = draw_inverse_cdf(probs.expand(n, -1))
    counts = torch.bincount(drawn, minlength=60).double()
    assert counts[probs == 0].sum() == 0
    stat, df = chi_square(counts, probs.double())
    assert stat < df + 7 * (2 * df) ** 0.5, (stat, df)  # p < 1e-6 for a correct sampler (normal approximation)
    # a row with all its mass on one entry and zeros after it: that entry, every time (u stays below the sum)
    one = torch.zeros(1000, 50)
    one[:, 7] = 1.0
    assert bool((draw_inverse_cdf(one) == 7).all())
    with pytest.raises(RuntimeError, match="nan"):
        draw_inverse_cdf(torch.full((2, 5), float("nan")))


@pytest.mark.parametrize("temperature, top_p, top_k", [(1.0, 1.0, 0), (0.7, 0.9, 0), (1.3, 1.0, 7)])
def test_the_default_draw_samples_the_warped_distribution_in_the_loop(tiny, temperature, top_p, top_k):
    """The first new token of 6,000 copies of one prompt, drawn by the decode loop with inverse_cdf, against
    the probabilities of the warped logits (temperature, top-k, top-p as generate applies them); the
    multinomial draw's counts pass the same test, and the two draws differ token for token."""
    model, tok = tiny
    prompt = prompts_of(tok, [1])[0]
    params = SamplingParams(max_new_tokens=1, temperature=temperature, top_p=top_p, top_k=top_k, batch_size=6000)
    warpers = sampling_warpers(model, params)
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt])).logits[:, -1].float()
        for warp in warpers:
            logits = warp(None, logits)
        probs = torch.softmax(logits, dim=-1)[0].double()
    stops, pad, cpu = stop_token_ids(tok, model), tok.pad_token_id, torch.device("cpu")
    firsts = {}
    for draw_with in ("inverse_cdf", "multinomial"):
        torch.manual_seed(3)
        with torch.inference_mode():
            rows = decode(model, [prompt] * 6000, params, warpers, stops, pad, cpu, draw_with=draw_with)
        firsts[draw_with] = torch.tensor([r[0] for r in rows])
        counts = torch.bincount(firsts[draw_with], minlength=probs.numel()).double()
        assert counts[probs == 0].sum() == 0, draw_with
        stat, df = chi_square(counts, probs)
        assert df >= 3 and stat < df + 7 * (2 * df) ** 0.5, (draw_with, stat, df)
    assert not torch.equal(firsts["inverse_cdf"], firsts["multinomial"])
