"""HF generation that keeps each conversation's KV cache from one turn to the next.

In a conversation episode turn t's prompt ids are turn t-1's prompt ids, the ids the model
generated, then the template's tokens for the tool results (``rollout/conversation.py``). HF
``generate`` would prefill that whole prompt again every turn; here the keys and values computed
in turn t-1 (its prompt and all but the last generated token) are kept after the call, keyed by
the ids they cover, and a later prompt that starts with those ids prefills only its new tail.

A batch mixes rows with caches of different lengths and tails of different lengths, so each row
is laid out as ``[left pad][cached ids][pad][tail]``: the kept keys/values are copied into a
zero-padded cache of the widest length, the holes are masked out, and position ids follow the
attention mask (cumsum), so every real token keeps the position it was encoded at. The tail is
prefilled into that cache, then ``generate`` decodes as usual (the same pattern as
``prefill.shared_prefill``). Greedy outputs equal the re-encoding path token for token
(tests/rollout/test_turn_cache.py): only the order of floating-point sums differs.

The kept caches are valid for one set of weights: they are dropped whenever a parameter changed
in place since they were stored (an optimizer step, ``load_state_dict``, a generator push), and
only each calling thread's last call's are kept (every live episode of a conversation batch is in
each call its thread makes). Per thread, because the asynchronous producers (``max_inflight`` > 1)
share one generator and take turns at its lock: keeping only the last call's entries let each
producer's call evict the other's, so no turn ever reused a cache. A prompt may ride on any
thread's entry (a token-exact prefix under the same weights is the same keys and values).
``max_bytes`` caps what is kept, all threads together; rows past it are simply re-encoded next turn.

Besides each conversation's own cache, the longest prefix that a call's distinct prompts share (an agent's
system prompt and tool schemas, ~270 tokens of a ~300-token first prompt) is prefilled once, as one row, and kept
as a shared entry across calls until the weights change: every conversation's first turn then prefills only its
own question (``MAX_SHARED`` such prefixes are kept, the newest last).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from grouprl.rollout.decode import common_prefix_length, generate_kwargs
from grouprl.rollout.prefill import left_pad, shared_prefill
from grouprl.rollout.sampling import Completion, SamplingParams, stop_token_ids
from grouprl.policy.cache_keyword import cache_keyword


@dataclass
class _Entry:
    ids: tuple[int, ...]  # the ids the keys/values cover
    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each [heads, len(ids), head_dim]


@dataclass
class TurnCacheStats:
    calls: int = 0
    prompt_tokens: int = 0  # prompt tokens the calls were given
    reused_tokens: int = 0  # of those, read from a kept cache instead of prefilled

    def as_dict(self) -> dict[str, float]:
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "reused_tokens": self.reused_tokens,
            "reused_share": self.reused_tokens / max(self.prompt_tokens, 1),
        }


@dataclass
class TurnCache:
    max_bytes: int = 1 << 30
    by_thread: dict[int, list[_Entry]] = field(default_factory=dict)  # each calling thread's last call's entries
    shared: list[_Entry] = field(default_factory=list)  # prefixes calls' distinct prompts shared, newest last
    weights_version: int | None = None
    stats: TurnCacheStats = field(default_factory=TurnCacheStats)

    @property
    def entries(self) -> list[_Entry]:
        return [entry for kept in self.by_thread.values() for entry in kept] + self.shared

    def bytes_of_others(self, thread: int) -> int:
        """What the other threads' kept entries hold (they count toward ``max_bytes``)."""
        return sum(
            k.nbytes + v.nbytes
            for t, kept in self.by_thread.items()
            if t != thread
            for entry in kept
            for k, v in entry.layers
        )

    def longest_prefix(self, prompt: list[int]) -> _Entry | None:
        """The kept entry covering the longest prefix of ``prompt`` (at least one token is left to prefill)."""
        best = None
        for entry in self.entries:
            n = len(entry.ids)
            if n < len(prompt) and (best is None or n > len(best.ids)) and tuple(prompt[:n]) == entry.ids:
                best = entry
        return best


def parameters_version(model) -> int:
    """Changes whenever any parameter is written in place (tensor version counters)."""
    return sum(p._version for p in model.parameters())


def _cache_layers(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def _padded_cache(model, hits: list[_Entry | None], width: int, device: torch.device):
    """A DynamicCache of ``width`` positions: row i holds its entry's keys/values right-aligned, zeros before."""
    from transformers import DynamicCache

    template = next(h for h in hits if h is not None).layers
    cache = DynamicCache(config=model.config)
    for layer, (keys, values) in enumerate(template):
        shape = (len(hits), keys.shape[0], width, keys.shape[-1])
        k = torch.zeros(shape, dtype=keys.dtype, device=device)
        v = torch.zeros(shape, dtype=values.dtype, device=device)
        for row, hit in enumerate(hits):
            if hit is not None:
                n = len(hit.ids)
                k[row, :, width - n :] = hit.layers[layer][0]
                v[row, :, width - n :] = hit.layers[layer][1]
        cache.update(k, v, layer)
    return cache


def _layout(chunk: list[list[int]], hits: list[_Entry | None], pad: int):
    """ids and mask ``[left pad][cached][pad][tail]`` for each row, and the cached width."""
    cached = [len(h.ids) if h is not None else 0 for h in hits]
    width = max(cached)
    tail = max(len(p) - c for p, c in zip(chunk, cached))
    ids = torch.full((len(chunk), width + tail), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, (prompt, c) in enumerate(zip(chunk, cached)):
        ids[row, width - c : width] = torch.tensor(prompt[:c], dtype=torch.long)
        mask[row, width - c : width] = 1
        rest = prompt[c:]
        ids[row, ids.shape[1] - len(rest) :] = torch.tensor(rest, dtype=torch.long)
        mask[row, ids.shape[1] - len(rest) :] = 1
    return ids, mask, width


def generate_with_turn_cache(
    model,
    tokenizer,
    prompt_ids: list[list[int]],
    params: SamplingParams,
    device: torch.device,
    store: TurnCache,
    prefill_once: bool = True,
) -> list[Completion]:
    """``generation.generate``'s contract, reusing ``store``'s kept caches and refilling it with this call's."""
    version = parameters_version(model)
    if version != store.weights_version:
        store.by_thread, store.shared, store.weights_version = {}, [], version
    thread = threading.get_ident()
    stops = stop_token_ids(tokenizer, model)
    pad = tokenizer.pad_token_id
    was_training = model.training
    model.eval()
    kept: list[_Entry] = []
    kept_bytes = store.bytes_of_others(thread)
    out: list[Completion] = []
    for start in range(0, len(prompt_ids), params.batch_size):
        chunk = prompt_ids[start : start + params.batch_size]
        hits = [store.longest_prefix(p) for p in chunk]
        if _seed_shared(model, chunk, hits, store, device):  # the common prefix prefilled once, then ridden
            hits = [store.longest_prefix(p) for p in chunk]
        kwargs = dict(
            max_new_tokens=params.max_new_tokens,
            eos_token_id=stops,
            pad_token_id=pad,
            use_cache=True,
            return_dict_in_generate=True,
            **generate_kwargs(params),
        )
        ids, mask = _prefill(model, chunk, hits, pad, device, prefill_once, kwargs)
        store.stats.prompt_tokens += sum(len(p) for p in chunk)
        store.stats.reused_tokens += sum(len(h.ids) for h in hits if h is not None)
        width = ids.shape[1]
        result = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
        rows, cut = [], []
        for row in result.sequences[:, width:].tolist():
            end = next((j for j, token in enumerate(row) if token in stops), None)
            rows.append(row if end is None else row[: end + 1])
            cut.append(end is None)
        texts = tokenizer.batch_decode(rows, skip_special_tokens=True)
        out.extend(Completion(r, t, c) for r, t, c in zip(rows, texts, cut))
        kept_bytes = _keep(result, chunk, rows, mask, width, store, kept, kept_bytes)
    store.by_thread[thread] = kept
    store.stats.calls += 1
    if was_training:
        model.train()
    return out


def _prefill(model, chunk, hits, pad, device, prefill_once: bool, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunk's ids and mask for ``generate``, its cache in ``kwargs``: the kept caches padded to one width
    and the tails prefilled where any row has a kept prefix; else the group's shared prefix prefilled once."""
    if any(h is not None for h in hits):
        ids, mask, width = _layout(chunk, hits, pad)
        ids, mask = ids.to(device), mask.to(device)
        cache = _padded_cache(model, hits, width, device)
        if ids.shape[1] - 1 > width:  # prefill the tails but their last token, which generate takes
            positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
            model(
                input_ids=ids[:, width:-1],
                attention_mask=mask[:, :-1],
                position_ids=positions[:, width:-1],
                **{cache_keyword(model): cache},
                use_cache=True,
                logits_to_keep=1,
            )
        kwargs[cache_keyword(model)] = cache
        return ids, mask
    shared = shared_prefill(model, chunk, pad, device) if prefill_once else None
    if shared is not None:
        ids, mask, kwargs[cache_keyword(model)] = shared
        return ids, mask
    return left_pad(chunk, pad)


def _keep(result, chunk, rows, mask, width: int, store: TurnCache, kept: list, kept_bytes: int) -> int:
    """Each row's cache (prompt slots, then every generated token but the last) kept for its next turn while
    the store's byte budget allows; returns the bytes now kept."""
    # transformers >= 5.24 names it ``cache`` (reading ``past_key_values`` warns); older releases do not have it
    layers = _cache_layers(result["cache"] if "cache" in result else result.past_key_values)
    bytes_per_token = sum(2 * k.shape[1] * k.shape[3] * k.element_size() for k, _ in layers)
    for i, (prompt, generated) in enumerate(zip(chunk, rows)):
        slots = torch.cat([mask[i].nonzero().flatten().cpu(), torch.arange(width, width + len(generated) - 1)])
        if kept_bytes + bytes_per_token * len(slots) > store.max_bytes:
            continue
        kept_bytes += bytes_per_token * len(slots)
        index = slots.to(layers[0][0].device)
        kept.append(
            _Entry(
                tuple(prompt) + tuple(generated[:-1]),
                [(k[i].index_select(1, index).clone(), v[i].index_select(1, index).clone()) for k, v in layers],
            )
        )
    return kept_bytes


MIN_SHARED_PREFIX = 32  # tokens: a shorter common prefix (a chat template's first line) is not worth an entry
MAX_SHARED = 4  # shared prefixes kept (a few system prompts in one run); the oldest goes first


def common_prefix(chunk: list[list[int]]) -> tuple[int, ...]:
    """The longest prefix the chunk's distinct prompts share, leaving each at least one token (``()`` when there are
    fewer than two distinct prompts)."""
    distinct = list({tuple(p): None for p in chunk})
    return distinct[0][: common_prefix_length([list(p) for p in distinct])] if len(distinct) > 1 else ()


def _remember_shared(store: TurnCache, entry: _Entry) -> None:
    store.shared = store.shared[-(MAX_SHARED - 1) :] + [entry]


@torch.no_grad()
def _seed_shared(model, chunk: list[list[int]], hits: list, store: TurnCache, device: torch.device) -> bool:
    """Where the chunk's distinct prompts share a long prefix that some row has no kept cache for (the first call
    of a run, of an evaluation, after an update), prefill that prefix once, as one row, and keep it as a shared
    entry: every row then prefills only its own tail. True when it did."""
    from transformers import DynamicCache

    prefix = common_prefix(chunk)
    n = len(prefix)
    if n < MIN_SHARED_PREFIX or all(h is not None and len(h.ids) >= n for h in hits):
        return False
    cache = DynamicCache(config=model.config)
    ids = torch.tensor([prefix], dtype=torch.long, device=device)
    model(
        input_ids=ids,
        position_ids=torch.arange(n, device=device).unsqueeze(0),
        **{cache_keyword(model): cache},
        use_cache=True,
        logits_to_keep=1,
    )
    layers = [(k[0].clone(), v[0].clone()) for k, v in _cache_layers(cache)]
    if sum(k.nbytes + v.nbytes for k, v in layers) > store.max_bytes:
        return False
    _remember_shared(store, _Entry(prefix, layers))
    return True
