"""``decode``'s tokens from a static KV cache, the one-token forward replayed as a CUDA graph (``speed.captured_decode``).

Why: on a GPU at generation's batch sizes ``decode`` is bound by Python and kernel launches, not by the device (the
same 2,048 tokens took 2.4 to 3.7 s on an H100, docs/performance.md "GPU check"), and its shapes change whenever a
row ends (cuDNN plans each new shape). Here every shape is fixed for a chunk, so one step can be captured once:

- the chunk is prefilled by ``decode.prefill`` (the shared prefix and each distinct prompt once), then its keys and
  values are copied into a transformers ``StaticCache`` of the prompt width plus ``max_new_tokens``;
- every row stays in the batch: a row that has stopped keeps decoding and what it makes after its stop is cut off
  at the end (``decode`` drops it from the batch instead, which changes the shapes);
- the loop owns a 4-D attention mask (one column opened per step), so the model builds no mask and nothing in the
  forward reads a value back to the host: on CUDA the forward is captured per (rows, cache length) as a
  ``torch.cuda.CUDAGraph`` and replayed each step (a captured cache's length is rounded up to ``CACHE_BUCKET`` so
  chunks of near widths share one graph);
- the host reads the device every ``SYNC_EVERY`` steps on CUDA (are all rows done? progress; a bad distribution),
  every step on the CPU, where a read costs nothing.

Same tokens as ``decode`` (tests/rollout/test_static_decode.py, on the CPU): greedy takes the argmax of the same
warped logits; a sampled step gives each live row the random numbers ``decode`` gives it. ``multinomial``: ``decode``
already draws on the whole chunk's shape (finished rows hold a uniform placeholder), and so does this loop.
``inverse_cdf``: ``decode`` draws one uniform number per live row, the j-th live row taking the j-th; here row i takes
the number at its rank among the live rows. On the CPU the loop draws exactly as many numbers as rows are live (a
host value there), so the generator advances as in ``decode``. On CUDA it draws one per row without asking how many
are live: in torch's CUDA kernel (ATen/native/cuda/DistributionTemplates.h) element j is thread j's first Philox
number and a call of up to ~250k elements advances the generator by the same offset, so ``rand(n)`` is the first n
numbers of ``rand(rows)``. That is a property of torch's kernel, not an API promise; the GPU check
(bench/device/captured_decode.py) compares the tokens on the device.

What differs: the logits come from a batch of another size over a longer (masked) cache, so they equal ``decode``'s to
float rounding, not bit for bit; and on CUDA a chunk may run up to ``SYNC_EVERY - 1`` steps past its last stop,
drawing numbers ``decode`` does not, so a later chunk's draws differ from ``decode``'s (the same distribution).
"""

from __future__ import annotations

import warnings
import weakref
from collections import OrderedDict
from typing import Any

import torch

from grouprl.policy.cache_keyword import cache_keyword
from grouprl.rollout.decode import DRAWS, StepProgress, prefill
from grouprl.rollout.sampling import SamplingParams

SYNC_EVERY = 8  # CUDA: steps between host reads; each read waits for the device and ends the host's lead
CACHE_BUCKET = 64  # a captured cache's length is rounded up to a multiple of this (fewer graphs to capture)
KEEP_ENGINES = 2  # captured engines kept per model, most recent first: each holds a cache and its graph's memory
ATTENTION = ("sdpa", "eager")  # the attention implementations whose 4-D mask this loop writes


def supports_static(model) -> bool:
    """A decoder-only model with full attention on every layer (a sliding-window or linear layer needs another
    cache and mask), under sdpa or eager attention."""
    config = model.config.get_text_config(decoder=True)
    if getattr(config, "is_encoder_decoder", False) or config._attn_implementation not in ATTENTION:
        return False
    return all(kind == "full_attention" for kind in getattr(config, "layer_types", None) or [])


def can_capture(model, device: torch.device) -> bool:
    """CUDA graphs need a CUDA device and parameters that stay where they are: not under FSDP, which gathers them
    into buffers of its own for each forward."""
    from torch.distributed.fsdp import FSDPModule

    return device.type == "cuda" and torch.cuda.is_available() and not isinstance(model, FSDPModule)


def static_decode(
    model,
    chunk: list[list[int]],
    params: SamplingParams,
    warpers: list,
    stops: list[int],
    pad: int,
    device: torch.device,
    progress: StepProgress | None = None,
    logprobs: list[list[float]] | None = None,
    draw_with: str = "inverse_cdf",
    capture: bool = False,
) -> list[list[int]]:
    """``decode``'s result (each prompt's new tokens up to and including its first stop id, ``logprobs`` filled
    the same way) from a static cache with every row kept to the end; ``capture``: the step as a CUDA graph."""
    if draw_with not in DRAWS:
        raise ValueError(f"draw_with: {draw_with!r}; expected one of {', '.join(DRAWS)}")
    rows, steps = len(chunk), params.max_new_tokens
    if not steps:  # decode's report for a cap of zero
        if progress is not None:
            progress(rows, rows, 0)
        return [[] for _ in chunk]
    cache, mask, tokens, positions = prefill(model, chunk, pad, device)
    width = mask.shape[1]
    engine = _engine(model, rows, width + steps, device, capture)
    engine.load(cache, mask, tokens, positions)
    del cache  # its keys and values are in the static cache now
    host = device.type == "cpu"  # a host read is free: check every step and draw exactly decode's count of numbers
    run = _Run(rows, steps, device, logprobs is not None, torch.tensor(stops, device=device))
    made = steps
    for step in range(steps):
        logits = engine.step(model, width + step)
        chosen, picked, bad = choose(logits, warpers, params, draw_with, run.live, host)
        run.record(step, chosen, picked, bad)
        engine.feed(chosen)
        last = step + 1 == steps
        if (last or host or (step + 1) % SYNC_EVERY == 0) and run.check(progress, last):
            made = step + 1
            break
    out = run.tokens[:, :made].tolist()
    stop_set, picked = set(stops), run.picked
    for i, row in enumerate(out):
        end = next((j for j, token in enumerate(row) if token in stop_set), len(row) - 1)
        del row[end + 1 :]
        if logprobs is not None and picked is not None:
            logprobs[i].extend(picked[i, : end + 1].tolist())
    return out


def choose(logits, warpers: list, params: SamplingParams, draw_with: str, live: torch.Tensor, host_count: bool):
    """One step's token for every row, as ``decode._next_tokens`` picks it for the live rows, with no host read
    (but the live count, with ``host_count``). Returns the tokens; their log-probs under the warped distribution
    (None when greedy); a 0-d flag, set where a live row's inverse-CDF distribution was not finite or summed to
    zero (None for the other draws)."""
    for warp in warpers:  # as generate: the warpers see the scores only
        logits = warp(None, logits)
    if params.greedy:
        return torch.argmax(logits, dim=-1), None, None
    probs = torch.softmax(logits, dim=-1)
    bad = None
    if draw_with == "inverse_cdf":
        chosen, bad = draw_inverse_cdf_static(probs, live, host_count)
    else:  # decode's placeholder for finished rows: the live rows' exponentials are drawn where decode draws them
        chosen = torch.multinomial(torch.where(live[:, None], probs, 1.0 / probs.shape[1]), 1).squeeze(1)
    picked = torch.log_softmax(logits, dim=-1).gather(1, chosen[:, None]).squeeze(1)
    return chosen, picked, bad


def draw_inverse_cdf_static(probs: torch.Tensor, live: torch.Tensor, host_count: bool):
    """``decode.draw_inverse_cdf`` on every row, each live row with the uniform number ``decode`` gives it (its
    rank among the live rows; module docstring). Its validity check is a flag to read later, not a host read."""
    cdf = probs.cumsum(dim=-1, dtype=torch.float64)
    total = cdf[:, -1:]
    bad = (live[:, None] & ~(torch.isfinite(total) & (total > 0))).any()
    count = int(live.sum()) if host_count else live.numel()
    rank = (live.cumsum(0) - 1).clamp(min=0)
    u = torch.rand((count, 1), dtype=torch.float64, device=probs.device)[rank] * total
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))
    # a finished row's distribution is never checked: keep its index in the vocabulary whatever it holds
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=probs.shape[1] - 1), bad


class _Run:
    """The loop's state on the device: each row's tokens (and log-probs), which rows are live, tokens generated,
    and whether a draw saw a bad distribution; read back only in ``check``."""

    def __init__(self, rows: int, steps: int, device: torch.device, with_logprobs: bool, stop_ids: torch.Tensor):
        self.rows, self.stop_ids = rows, stop_ids
        self.tokens = torch.zeros((rows, steps), dtype=torch.long, device=device)
        self.picked = torch.zeros((rows, steps), dtype=torch.float32, device=device) if with_logprobs else None
        self.live = torch.ones(rows, dtype=torch.bool, device=device)
        self.made = torch.zeros((), dtype=torch.long, device=device)
        self.bad = torch.zeros((), dtype=torch.bool, device=device)

    def record(self, step: int, chosen: torch.Tensor, picked, bad) -> None:
        self.tokens[:, step] = chosen
        if self.picked is not None and picked is not None:
            self.picked[:, step] = picked
        if bad is not None:
            self.bad |= bad
        self.made += self.live.sum()  # decode counts the rows in its batch at each step
        self.live &= ~torch.isin(chosen, self.stop_ids)

    def check(self, progress: StepProgress | None, last: bool) -> bool:
        """One host read: raise where a draw was invalid (``decode`` raises there), report progress as ``decode``
        does; True when every row is done (or at the cap)."""
        live, made, bad = torch.stack([self.live.sum(), self.made, self.bad.long()]).tolist()
        if bad:
            raise RuntimeError("probability tensor contains inf, nan or no positive entry")
        done = live == 0 or last
        if progress is not None:
            progress(self.rows if done else self.rows - live, self.rows, made)
        return done


class _Engine:
    """A ``StaticCache`` for ``rows`` rows of ``length`` positions, the step's inputs (tokens, positions, a 4-D mask)
    at fixed addresses, and on CUDA the step captured as a graph that reads and writes only those."""

    def __init__(self, model, rows: int, length: int, device: torch.device):
        from transformers import StaticCache

        config = model.config.get_text_config(decoder=True)
        dtype = model.get_input_embeddings().weight.dtype
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.cache: Any = StaticCache(config=model.config, max_cache_len=length)  # its layers: StaticLayer
        self.cache.early_initialization(rows, heads, head_dim, dtype, device)
        self.keyword = cache_keyword(model)
        self.tokens = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.positions = torch.zeros_like(self.tokens)
        # sdpa takes a boolean mask (True: attend); eager adds it to the scores (0, or the dtype's minimum)
        eager = config._attn_implementation == "eager"
        self.open: bool | float = 0.0 if eager else True
        self.closed: bool | float = torch.finfo(dtype).min if eager else False
        mask_dtype = dtype if eager else torch.bool
        self.mask = torch.full((rows, 1, 1, length), self.closed, dtype=mask_dtype, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None

    def forward(self, model) -> torch.Tensor:
        out = model(
            input_ids=self.tokens,
            attention_mask=self.mask,
            position_ids=self.positions,
            **{self.keyword: self.cache},
            use_cache=True,
        )
        return out.logits[:, -1].to(dtype=torch.float32)

    def capture(self, model) -> None:
        """The step as a CUDA graph. A first run on a side stream (as torch's CUDA-graph notes ask) picks the
        kernels and allocates their workspaces outside the capture; it writes one slot that ``load`` resets."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.forward(model)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self.forward(model)

    def load(self, cache, mask: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor) -> None:
        """A chunk's prefill into the static buffers: keys and values in the first slots, the mask over them, the
        last prompt tokens and their positions as the first step's input."""
        width = mask.shape[1]
        for static, prefilled in zip(self.cache.layers, cache.layers):
            if width:
                static.keys[:, :, :width].copy_(prefilled.keys)
                static.values[:, :, :width].copy_(prefilled.values)
            static.cumulative_length.fill_(width)  # where the next step writes
        self.mask.fill_(self.closed)
        self.mask[:, 0, 0, :width].masked_fill_(mask.bool(), self.open)
        self.tokens.copy_(tokens[:, None])
        self.positions.copy_(positions[:, None])

    def step(self, model, slot: int) -> torch.Tensor:
        """The step's logits (rows, vocabulary), float32; it writes ``slot``, so every row may attend to it."""
        self.mask[:, :, :, slot] = self.open
        if self.graph is None:
            return self.forward(model)
        self.graph.replay()
        assert self.logits is not None
        return self.logits

    def feed(self, chosen: torch.Tensor) -> None:
        self.tokens.copy_(chosen[:, None])
        self.positions.add_(1)


# captured engines per model (weakly: a model dropped by the run frees its graphs), most recently used last
_ENGINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _engine(model, rows: int, length: int, device: torch.device, capture: bool) -> _Engine:
    """A fresh engine for an uncaptured loop; for a captured one, the model's engine of this shape if its
    parameters and buffers are still where the graph reads them, else a new one (the oldest dropped)."""
    if not capture:
        return _Engine(model, rows, length, device)
    length = -(-length // CACHE_BUCKET) * CACHE_BUCKET
    where = tuple(t.data_ptr() for t in (*model.parameters(), *model.buffers()))
    key = (rows, length, str(device), model.config._attn_implementation, hash(where))
    engines: OrderedDict = _ENGINES.setdefault(model, OrderedDict())
    if key in engines:
        engines.move_to_end(key)
        return engines[key]
    while len(engines) >= KEEP_ENGINES:
        engines.popitem(last=False)
    engine = engines[key] = _Engine(model, rows, length, device)
    try:
        engine.capture(model)
    except RuntimeError as err:  # an op the capture refuses: the same loop, its step run eagerly
        engine.graph, engine.logits = None, None
        warnings.warn(f"captured decode: the step could not be captured, running it eagerly ({err})", stacklevel=2)
    return engine


def release(model) -> None:
    """Drop ``model``'s captured engines (their caches and graph memory)."""
    _ENGINES.pop(model, None)
