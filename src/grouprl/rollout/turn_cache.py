"""HF generation that keeps each conversation's KV cache from one turn to the next, on grouprl's decode loop.

In a conversation turn t's prompt starts with turn t-1's prompt and what the model generated, then the template's
tokens for the tool results (``rollout/conversation.py``, or an agent's messages rendered again by the endpoint).
Re-encoding it every turn makes a four-turn conversation prefill its early turns three times: on a 135M model
that is most of a looping agent's evaluation time. Here, as each row of the decode loop ends (``decode``'s
``keep``), its keys and values (prompt and every new token but the last) are kept, keyed by the ids they cover;
a later prompt prefills only what follows the **longest prefix it shares with any kept entry**. A partial match
counts: where the endpoint renders the assistant's call differently from the tokens sampled, the turn still
rides everything before the difference.

A chunk mixes rows with kept prefixes of different lengths, so each row is laid out as
``[left pad][kept ids][pad][tail]``: the kept keys/values are copied into a zero-padded cache of the widest
length, the holes are masked out, and position ids follow the mask (cumsum), so every token keeps the position
it was encoded at; then the decode loop runs as usual (finished rows leave the batch). The tokens equal the
re-encoding path's (tests/rollout/test_turn_cache.py): only the order of floating-point sums differs.

What is kept, and for how long (memory is the cost: 46 KB a token on SmolLM2-135M in fp32):
- an entry a row rode past its prompt is that conversation's history: it is dropped once the row's new entry
  (which covers it) is made; an entry not ridden for ``max_idle_calls`` calls is dropped (its episode
  ended); past ``max_bytes`` the oldest go first;
- the longest prefix a call's distinct prompts share (an agent's system prompt and tool schemas) is prefilled
  once, as one row, and kept as a shared entry (``MAX_SHARED``, the newest last), never dropped on use;
- everything is dropped when any parameter changed in place since it was stored (an optimizer step,
  ``load_state_dict``, a generator push): kept caches belong to the weights that made them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import torch

from grouprl.policy.cache_keyword import cache_keyword
from grouprl.rollout.decode import common_prefix_length, decode, sampling_warpers
from grouprl.rollout.sampling import Completion, SamplingParams, stop_token_ids

MIN_SHARED_PREFIX = 32  # tokens: a shorter common prefix (a chat template's first line) is not worth an entry
MAX_SHARED = 4  # shared prefixes kept (a few system prompts in one run); the oldest goes first


@dataclass
class _Entry:
    ids: tuple[int, ...]  # the ids the keys/values cover
    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each [heads, len(ids), head_dim]
    last_used: int = 0  # the store's call count when it was made or last ridden
    prompt_length: int = 0  # of ids, the prompt's (the rest was generated): a ride past it continues this conversation
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.nbytes = sum(k.nbytes + v.nbytes for k, v in self.layers)


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
    max_bytes: int = 3 << 30  # an evaluation's 100 agents in flight at turn 4: ~2 GB on SmolLM2
    max_idle_calls: int = 4
    own: list[_Entry] = field(default_factory=list)  # conversations' kept caches, oldest first
    shared: list[_Entry] = field(default_factory=list)  # prefixes calls' distinct prompts shared, newest last
    weights_version: int | None = None
    stats: TurnCacheStats = field(default_factory=TurnCacheStats)
    lock: threading.Lock = field(default_factory=threading.Lock)  # async producers share one store

    @property
    def entries(self) -> list[_Entry]:
        return self.own + self.shared

    def longest_prefixes(self, prompts: list[list[int]]) -> list[tuple[_Entry | None, int]]:
        """For each prompt, the kept entry sharing the longest prefix with it and that length (at least one token
        is left to prefill); shared entries win ties (they are never dropped on use)."""
        kept = self.shared + self.own[::-1]
        if not kept:
            return [(None, 0) for _ in prompts]
        width = max(len(e.ids) for e in kept)
        table = np.full((len(kept), width), -1, dtype=np.int64)
        for i, entry in enumerate(kept):
            table[i, : len(entry.ids)] = entry.ids
        found: list[tuple[_Entry | None, int]] = []
        for prompt in prompts:
            n = min(len(prompt) - 1, width)
            same = table[:, :n] == np.asarray(prompt[:n], dtype=np.int64)
            lengths = np.cumprod(same, axis=1).sum(axis=1) if n > 0 else np.zeros(len(kept), dtype=np.int64)
            best = int(lengths.argmax())
            found.append((kept[best], int(lengths[best])) if lengths[best] > 0 else (None, 0))
        return found

    def keep(self, entry: _Entry) -> None:
        total = sum(e.nbytes for e in self.own) + sum(e.nbytes for e in self.shared)
        while self.own and total + entry.nbytes > self.max_bytes:
            total -= self.own.pop(0).nbytes
        if total + entry.nbytes <= self.max_bytes:
            self.own.append(entry)

    def drop(self, entry: _Entry) -> None:
        self.own = [e for e in self.own if e is not entry]

    def forget_idle(self) -> None:
        self.own = [e for e in self.own if self.stats.calls - e.last_used <= self.max_idle_calls]


def episodes_ended(backend) -> None:
    """A runner's episodes have all ended: no kept conversation will have another turn, so their keys and values
    go (the shared prefixes stay until the weights change), and the freed heap goes back to the kernel before the
    update allocates its own (``speed/free_heap.py``)."""
    from grouprl.speed.free_heap import release_free_heap

    store = getattr(backend, "turn_cache", None)
    if isinstance(store, TurnCache):
        with store.lock:
            store.own = []
    release_free_heap()


def parameters_version(model) -> int:
    """Changes whenever any parameter is written in place (tensor version counters)."""
    return sum(p._version for p in model.parameters())


def generate_with_turn_cache(
    model,
    tokenizer,
    prompt_ids: list[list[int]],
    params: SamplingParams,
    device: torch.device,
    store: TurnCache,
    prefill_once: bool = True,
    record_logprobs: bool = False,
    draw_with: str = "inverse_cdf",
) -> list[Completion]:
    """``generation.generate``'s contract on the decode loop, reusing ``store``'s kept caches and refilling it
    (sampled completions carry their log-probs with ``record_logprobs``). The caller keeps ``model.generate`` where
    the decode loop does not apply (``sampling_warpers`` is None: a logits processor it does not have)."""
    warpers = sampling_warpers(model, params)
    if warpers is None:
        raise ValueError("the turn cache runs on the decode loop: these sampling settings need model.generate")
    stops = stop_token_ids(tokenizer, model)
    pad = tokenizer.pad_token_id
    was_training = model.training
    model.eval()
    out: list[Completion] = []
    with store.lock:
        version = parameters_version(model)
        if version != store.weights_version:
            store.own, store.shared, store.weights_version = [], [], version
        store.stats.calls += 1
        for start in range(0, len(prompt_ids), params.batch_size):
            chunk = prompt_ids[start : start + params.batch_size]

            def keep(row: int, new: list[int], cache, j: int, mask: torch.Tensor, chunk=chunk) -> None:
                slots = mask.nonzero().flatten()
                ids = tuple(chunk[row]) + tuple(new[:-1])
                if len(slots) == len(ids):  # (always, by the layout; a mismatch would only cost the reuse)
                    layers = [(k[j].index_select(1, slots), v[j].index_select(1, slots)) for k, v in _layers(cache)]
                    store.keep(_Entry(ids, layers, store.stats.calls, len(chunk[row])))

            logprobs: list[list[float]] | None = [[] for _ in chunk] if record_logprobs and not params.greedy else None
            rows = decode(
                model,
                chunk,
                params.rows(start, start + len(chunk)),
                warpers,
                stops,
                pad,
                device,
                _progress(params, len(out), sum(len(c.ids) for c in out), len(prompt_ids)),
                logprobs,
                draw_with,
                start=lambda m, c, p, d: _start(m, c, p, d, store),
                keep=keep,
            )
            out.extend(_completions(tokenizer, rows, stops, logprobs))
        store.forget_idle()
    if was_training:
        model.train()
    return out


def _completions(tokenizer, rows: list[list[int]], stops: list[int], logprobs) -> list[Completion]:
    """The decode loop's rows as completions: each up to its first stop (a row without one was cut at the cap)."""
    cut = []
    for i, row in enumerate(rows):
        end = next((j for j, token in enumerate(row) if token in stops), None)
        rows[i] = row if end is None else row[: end + 1]
        cut.append(end is None)
    texts = tokenizer.batch_decode(rows, skip_special_tokens=True)
    scores = [None] * len(rows) if logprobs is None else [lp[: len(r)] for lp, r in zip(logprobs, rows)]
    return [Completion(r, t, c, lp) for r, t, c, lp in zip(rows, texts, cut, scores)]


def _progress(params: SamplingParams, done: int, made: int, total: int):
    """The decode loop's per-step report, counted over the whole call (``params.progress``)."""
    if params.progress is None:
        return None
    base = params.progress
    return lambda finished, _, tokens: base(done + finished, total, made + tokens)


def _layers(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def _start(model, chunk: list[list[int]], pad: int, device: torch.device, store: TurnCache):
    """``decode.prefill``'s contract from the store: each distinct prompt rides its longest kept prefix (the
    chunk's shared prefix prefilled once and kept first where it is longer), only the tails are prefilled, then
    the cache is forked to the chunk's rows (a group's K copies)."""
    from transformers import DynamicCache

    unique: dict[tuple[int, ...], int] = {}
    rows = [unique.setdefault(tuple(p), len(unique)) for p in chunk]
    prompts = [list(p) for p in unique]
    hits = store.longest_prefixes(prompts)
    if _seed_shared(model, prompts, hits, store, device):
        hits = store.longest_prefixes(prompts)
    shared = {id(e) for e in store.shared}
    done: dict[int, _Entry] = {}  # this conversation's history, which the row's new entry will cover (a ride that
    for entry, n in hits:  # ends within an entry's prompt is another conversation's: that entry stays)
        if entry is not None:
            entry.last_used = store.stats.calls
            if id(entry) not in shared and n >= entry.prompt_length:
                store.drop(entry)
                done[id(entry)] = entry
    ids, mask, width = _layout(prompts, [n for _, n in hits], pad)
    ids, mask = ids.to(device), mask.to(device)
    cache = (
        _padded_cache(model, hits, width, device, list(done.values())) if width else DynamicCache(config=model.config)
    )
    store.stats.prompt_tokens += sum(len(p) for p in chunk)
    store.stats.reused_tokens += sum(hits[r][1] for r in rows)
    if ids.shape[1] - 1 > width:  # prefill the tails but their last token, which the decode loop takes
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
        model(
            input_ids=ids[:, width:-1],
            attention_mask=mask[:, :-1],
            position_ids=positions[:, width:-1],
            **{cache_keyword(model): cache},
            use_cache=True,
            logits_to_keep=1,
        )
    index = torch.tensor(rows, device=device)
    if len(prompts) < len(chunk) and ids.shape[1] > 1:  # (nothing cached: one-token prompts)
        cache.batch_select_indices(index)
    mask = mask[:, :-1][index]
    return cache, mask, ids[:, -1][index], mask.sum(-1)


def _padded_cache(model, hits: list[tuple[_Entry | None, int]], width: int, device: torch.device, spent: list):
    """A DynamicCache of ``width`` positions: row i holds its entry's first n keys/values right-aligned, zeros
    before. The ``spent`` entries' layers are freed as they are copied (the new cache does not double memory)."""
    from transformers import DynamicCache

    shapes = [(k.shape, k.dtype) for k, _ in next(e for e, _ in hits if e is not None).layers]
    cache = DynamicCache(config=model.config)
    empty = torch.empty(0)
    for layer, ((heads, _, dim), dtype) in enumerate(shapes):
        k = torch.zeros((len(hits), heads, width, dim), dtype=dtype, device=device)
        v = torch.zeros_like(k)
        for row, (entry, n) in enumerate(hits):
            if entry is not None and n:
                k[row, :, width - n :] = entry.layers[layer][0][:, :n]
                v[row, :, width - n :] = entry.layers[layer][1][:, :n]
        for entry in spent:
            entry.layers[layer] = (empty, empty)
        cache.update(k, v, layer)
    return cache


def _layout(prompts: list[list[int]], cached: list[int], pad: int):
    """ids and mask ``[left pad][cached][pad][tail]`` for each row, and the cached width."""
    width = max(cached)
    tail = max(len(p) - c for p, c in zip(prompts, cached))
    ids = torch.full((len(prompts), width + tail), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, (prompt, c) in enumerate(zip(prompts, cached)):
        ids[row, width - c : width] = torch.tensor(prompt[:c], dtype=torch.long)
        mask[row, width - c : width] = 1
        rest = prompt[c:]
        ids[row, ids.shape[1] - len(rest) :] = torch.tensor(rest, dtype=torch.long)
        mask[row, ids.shape[1] - len(rest) :] = 1
    return ids, mask, width


def common_prefix(chunk: list[list[int]]) -> tuple[int, ...]:
    """The longest prefix the chunk's distinct prompts share, leaving each at least one token (``()`` when there are
    fewer than two distinct prompts)."""
    distinct = list({tuple(p): None for p in chunk})
    return distinct[0][: common_prefix_length([list(p) for p in distinct])] if len(distinct) > 1 else ()


@torch.no_grad()
def _seed_shared(model, prompts: list[list[int]], hits: list, store: TurnCache, device: torch.device) -> bool:
    """Where the distinct prompts share a long prefix that some row has no longer kept match for (the first call
    of a run, of an evaluation, after an update), prefill that prefix once, as one row, and keep it as a shared
    entry: every row then prefills only its own tail. True when it did."""
    from transformers import DynamicCache

    prefix = common_prefix(prompts)
    n = len(prefix)
    if n < MIN_SHARED_PREFIX or all(length >= n for _, length in hits):
        return False
    cache = DynamicCache(config=model.config)
    model(
        input_ids=torch.tensor([prefix], dtype=torch.long, device=device),
        position_ids=torch.arange(n, device=device).unsqueeze(0),
        **{cache_keyword(model): cache},
        use_cache=True,
        logits_to_keep=1,
    )
    layers = [(k[0].clone(), v[0].clone()) for k, v in _layers(cache)]
    if sum(k.nbytes + v.nbytes for k, v in layers) > store.max_bytes:
        return False
    store.shared = store.shared[-(MAX_SHARED - 1) :] + [_Entry(prefix, layers, store.stats.calls)]
    return True
