"""Room in the decode loop's KV cache (speed/kv_room.py): a step writes in place, and nothing else changes."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, DynamicCache
from transformers.cache_utils import DynamicLayer

from grouprl.models.loading import load_tokenizer
from grouprl.rollout.generation import HFBackend, SamplingParams
from grouprl.speed.kv_room import reserve


def filled(rows: int = 3, length: int = 5, layers: int = 2) -> DynamicCache:
    cache = DynamicCache()
    for i in range(layers):
        cache.update(torch.randn(rows, 2, length, 4), torch.randn(rows, 2, length, 4), i)
    return cache


def test_steps_write_in_place_and_read_as_the_concatenation():
    torch.manual_seed(0)
    cache, plain = filled(), filled()
    for a, b in zip(cache.layers, plain.layers):
        b.keys, b.values = a.keys.clone(), a.values.clone()
    assert reserve(cache, 3) == 2
    buffer = cache.layers[0].room_keys.data_ptr()
    for _ in range(3):
        k, v = torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 4)
        ours, theirs = cache.update(k, v, 0), plain.update(k.clone(), v.clone(), 0)
        assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])
    assert cache.layers[0].room_keys.data_ptr() == buffer  # no copy of the cache: the same buffer throughout
    assert cache.get_seq_length(0) == plain.get_seq_length(0) == 8
    cache.batch_select_indices(torch.tensor([2, 0]))
    plain.batch_select_indices(torch.tensor([2, 0]))
    assert torch.equal(cache.layers[0].keys, plain.layers[0].keys)


def test_out_of_room_crop_and_layers_it_does_not_know_turn_plain():
    cache = filled(layers=1)
    reserve(cache, 1)
    cache.update(torch.ones(3, 2, 1, 4), torch.ones(3, 2, 1, 4), 0)
    keys, _ = cache.update(torch.full((3, 2, 2, 4), 2.0), torch.full((3, 2, 2, 4), 2.0), 0)  # needs 2, has 0
    assert type(cache.layers[0]) is DynamicLayer and keys.shape[-2] == 8 and float(keys[0, 0, -1, 0]) == 2.0
    cache = filled(layers=1)
    reserve(cache, 4)
    cache.crop(-2)
    assert type(cache.layers[0]) is DynamicLayer and cache.get_seq_length() == 3
    cache = filled(layers=1)
    reserve(cache, 4)
    cache.reset()
    assert type(cache.layers[0]) is DynamicLayer and cache.get_seq_length() == 0
    assert reserve(DynamicCache(), 4) == 0 and reserve(filled(), 0) == 0  # nothing filled, or no room asked


def test_decoding_with_room_gives_the_same_tokens_and_log_probs(tiny_arithmetic_dir, monkeypatch):
    model = AutoModelForCausalLM.from_pretrained(tiny_arithmetic_dir).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)  # spread the untrained model's logits: rows end at different steps
    tokenizer = load_tokenizer(str(tiny_arithmetic_dir))
    prompts = [tokenizer(t).input_ids for t in ["3 + 4?", "12 * 11? Digits only.", "7 - 2?"] for _ in range(3)]
    params = SamplingParams(max_new_tokens=20, temperature=0.9, batch_size=64)

    def run():
        torch.manual_seed(3)
        out = HFBackend(model, tokenizer, torch.device("cpu"), record_logprobs=True).generate(prompts, params)
        return [c.ids for c in out], [c.logprobs for c in out]

    roomy = run()
    monkeypatch.setattr("grouprl.rollout.decode.reserve", lambda cache, extra: 0)
    assert roomy == run()
    assert len({len(ids) for ids in roomy[0]}) > 1 and all(roomy[1])  # rows of several lengths, log-probs kept
