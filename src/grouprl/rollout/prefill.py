"""Prefill helpers shared by the HF generation paths (``generation.py``, ``turn_cache.py``): left padding,
and a group's identical prompts prefilled once with the KV cache forked to its copies."""

from __future__ import annotations

import torch
from grouprl.policy.cache_keyword import cache_keyword


def left_pad(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    return ids, mask


def shared_prefill(model, chunk: list[list[int]], pad: int, device: torch.device):
    """Prefill each distinct prompt once and fork its KV cache to its copies.

    HF ``generate`` would prefill all K copies of a group's prompt. Instead: run the unique prompts
    (all but their last token) through the model into a ``DynamicCache``, then index the cache's
    batch dimension so that row i holds its prompt's keys and values; ``generate`` then processes
    only the last prompt token and decodes as usual. Position ids are the ones ``generate`` derives
    from the left-padded mask, so the result is the same computation (greedy outputs are identical;
    tests/rollout/test_generation.py). Returns None when there is nothing to share.
    """
    from transformers import DynamicCache

    unique: dict[tuple[int, ...], int] = {}
    rows = [unique.setdefault(tuple(p), len(unique)) for p in chunk]
    if len(unique) == len(chunk) or min(len(p) for p in chunk) < 2:
        return None
    ids, mask = left_pad([list(p) for p in unique], pad)
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    cache = DynamicCache(config=model.config)
    model(
        input_ids=ids[:, :-1],
        attention_mask=mask[:, :-1],
        position_ids=positions[:, :-1],
        **{cache_keyword(model): cache},
        use_cache=True,
        logits_to_keep=1,
    )
    index = torch.tensor(rows, device=device)
    cache.batch_select_indices(index)
    return ids[index], mask[index], cache
