"""grouprl's decode loop on the real model (SmolLM2-135M-Instruct, the main job's): the main job's held-out
prompts (the chat template's system prompt shared by all) greedy, and a training step's groups sampled at
its temperature, give exactly what ``model.generate`` gives: grouprl's default path (the decode loop, its linear
layers through oneDNN) against HF's own (``generate``, ATen's kernels)."""

from __future__ import annotations

import random

import pytest
import torch

from grouprl.rollout.generation import HFBackend, SamplingParams, _hf_generate, stop_token_ids
from real_model import smollm2_dir  # noqa: F401 - the session fixture


@pytest.fixture(scope="module")
def real(smollm2_dir):
    from transformers import AutoModelForCausalLM

    from grouprl.models.loading import load_tokenizer

    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    return model, load_tokenizer(str(smollm2_dir))


def main_job_prompts(tokenizer, n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        question = f"Compute {rng.randint(10, 99)} + {rng.randint(10, 99)}. Reply with only the number."
        out.append(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
    return out


def run(model, tokenizer, prompts, params, fast: bool, seed: int = 0):
    torch.manual_seed(seed)
    backend = HFBackend(model, tokenizer, torch.device("cpu"), prefill_once=fast, onednn=fast, draw_with="multinomial")
    return backend.generate(prompts, params)  # multinomial: generate's own draws, so a seed gives its tokens


def test_held_out_prompts_greedy_are_token_identical_to_generate(real):
    model, tok = real
    prompts = main_job_prompts(tok, 16)
    params = SamplingParams(max_new_tokens=12, greedy=True)
    ours, reference = run(model, tok, prompts, params, True), run(model, tok, prompts, params, False)
    assert [c.ids for c in ours] == [c.ids for c in reference]
    # and the previous path (a group's prompt prefilled once, then generate), on groups of 4
    groups = [p for p in prompts[:4] for _ in range(4)]
    previous = _hf_generate(
        model, groups, params, stop_token_ids(tok, model), tok.pad_token_id, torch.device("cpu"), prefill_once=True
    )
    grouped = run(model, tok, groups, params, True)
    assert [c.ids for c in grouped] == [row[: len(c.ids)] for row, c in zip(previous, grouped)]  # (its rows pad on)
    assert [c.text for c in ours] == [c.text for c in reference]
    assert any(not c.truncated for c in ours) and any(c.truncated for c in ours)  # rows left the batch early


def test_a_long_generation_on_packed_weights_is_token_identical(real, monkeypatch):
    """Past ``PACK_AFTER_CALLS`` decode passes the linears run on oneDNN's packed copies: the same tokens, sampled."""
    from grouprl.speed import onednn_linear

    model, tok = real
    prompts = main_job_prompts(tok, 4, seed=1)
    params = SamplingParams(max_new_tokens=14, temperature=0.9)
    monkeypatch.setattr(onednn_linear, "PACK_AFTER_CALLS", 10**9)
    unpacked = run(model, tok, prompts, params, True, seed=3)
    packs: list[int] = []
    reorder = onednn_linear._reorder
    monkeypatch.setattr(onednn_linear, "_reorder", lambda w, rows: packs.append(rows) or reorder(w, rows))
    monkeypatch.setattr(onednn_linear, "PACK_AFTER_CALLS", 4)
    packed = run(model, tok, prompts, params, True, seed=3)
    assert len(packs) == 211  # SmolLM2's 30 x 7 linears and its head, each packed once
    assert [c.ids for c in packed] == [c.ids for c in unpacked]
    assert max(len(c.ids) for c in packed) > 6


def test_training_groups_sampled_make_generates_draws(real):
    model, tok = real
    prompts = [p for p in main_job_prompts(tok, 2, seed=1) for _ in range(8)]  # 2 prompts x K=8
    params = SamplingParams(max_new_tokens=16, temperature=0.7)
    for seed in (0, 1):
        ours, reference = run(model, tok, prompts, params, True, seed), run(model, tok, prompts, params, False, seed)
        assert [c.ids for c in ours] == [c.ids for c in reference]
    assert len({tuple(c.ids) for c in ours[:8]}) > 1
