"""grouprl's decode loop for HF models: HF ``generate``'s sampling, with less work per chunk.

What it does that ``model.generate`` does not (docs/performance.md, "Where the main job's time goes"):

- the prompts' **common prefix** (a chat template's system prompt, the task's instruction) runs through the
  model once, then each **distinct** prompt's remainder once, on the prefix's forked cache (``prefill``);
- a row that has ended (a stop id) **leaves the decode batch**: its keys and values are dropped from the
  cache, so later steps compute only the live rows;
- a **per-step callback** reports rows finished and tokens generated, so a long evaluation shows progress
  from inside one batched generation;
- per step only the forward, HF's own logits warpers (temperature, top-k, top-p, in ``generate``'s order)
  and the draw;
- on request (``logprobs``), each **sampled token's log-prob** under the distribution it was drawn from (the
  warped logits' log-softmax): the behaviour log-probs an asynchronous producer needs
  (``rollout/weight_sync.py``), without scoring the completions again.

The distribution is ``generate``'s: the same warpers, then ``softmax`` and a draw; greedy takes the same
``argmax``. Two draws (``speed.sampling_draw``): ``inverse_cdf`` (the default) inverts each row's cumulative
sum at one uniform number, where ``torch.multinomial`` draws one exponential per vocabulary entry (16 x
49,152 a SmolLM2 step): the same categorical distribution at a fraction of the random numbers, but not
``generate``'s tokens for a given seed (a distribution test checks it). ``multinomial`` keeps
``generate``'s draws: ``torch.multinomial`` on the whole chunk's ``(rows, vocab)`` probabilities (finished
rows hold a placeholder row), so a fixed generator makes the same draws in the same order. Where the model's generation
config asks for anything else (a repetition penalty, min length, bad words, ...), ``sampling_warpers``
returns None and the caller keeps ``model.generate``. Tests: tests/rollout/test_decode.py.
"""

from __future__ import annotations

from typing import Callable

import torch

from grouprl.policy.cache_keyword import cache_keyword
from grouprl.rollout.keyed_draws import keyed_uniform
from grouprl.rollout.sampling import SamplingParams
from grouprl.speed.kv_room import reserve

# (rows finished, rows, tokens generated) after each decode step
StepProgress = Callable[[int, int, int], None]
# (row of the chunk, its new tokens so far, the cache, that row's index in it, its attention mask): a row has ended;
# the cache holds its prompt and every new token but the last (never fed back) at the mask's real slots
RowKept = Callable[[int, list[int], object, int, torch.Tensor], None]

# generation-config fields that make HF ``generate`` add a logits processor this loop does not have, with the
# values that add none; any of them set to something else sends the chunk to ``model.generate`` instead
_OTHER_PROCESSORS: dict[str, object] = {
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "min_length": 0,
    "min_new_tokens": 0,
    "sequence_bias": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "remove_invalid_values": False,
    "exponential_decay_length_penalty": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "min_p": None,
    "top_h": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "watermarking_config": None,
    "guidance_scale": 1.0,
    "num_beams": 1,
    "num_beam_groups": 1,
    "diversity_penalty": 0.0,
    "renormalize_logits": False,
    "stop_strings": None,
    "max_time": None,
    "prompt_lookup_num_tokens": None,
    "assistant_early_exit": None,
    "penalty_alpha": None,
}


def sampling_warpers(model, params: SamplingParams) -> list | None:
    """HF's logits warpers for ``params`` resolved as ``model.generate`` resolves them (the model's
    generation config, then these keyword arguments), in ``generate``'s order; None where ``generate``
    would do something this loop does not (the caller then runs ``generate``)."""
    import copy

    from transformers import GenerationConfig, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    if getattr(model.config, "is_encoder_decoder", False):
        return None
    config = copy.deepcopy(getattr(model, "generation_config", None) or GenerationConfig())
    config.update(**generate_kwargs(params))
    if any(getattr(config, name, None) not in (None, neutral) for name, neutral in _OTHER_PROCESSORS.items()):
        return None
    if not config.do_sample:
        return []
    warpers: list = []
    if config.temperature is not None and config.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(config.temperature))
    if config.top_k is not None and config.top_k != 0:
        warpers.append(TopKLogitsWarper(top_k=config.top_k, min_tokens_to_keep=1))
    if config.top_p is not None and config.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=config.top_p, min_tokens_to_keep=1))
    return warpers


def generate_kwargs(params: SamplingParams) -> dict:
    """The sampling keyword arguments grouprl hands ``model.generate`` (and resolves the same way here)."""
    if params.greedy:
        return dict(do_sample=False, temperature=None, top_p=None, top_k=None)
    return dict(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or None)


def common_prefix_length(prompts: list[list[int]]) -> int:
    """Tokens every prompt starts with, leaving each at least its last token (the first decode input)."""
    first, shortest = prompts[0], min(len(p) for p in prompts)
    n = 0
    while n < shortest - 1 and all(p[n] == first[n] for p in prompts):
        n += 1
    return n


def prefill(model, chunk: list[list[int]], pad: int, device: torch.device):
    """Every prompt but its last token into a ``DynamicCache``, each shared piece computed once.

    The common prefix (length p) runs as one row; its cache is forked to the distinct prompts, whose
    remainders (all but the last token) run on top of it, left-padded after the prefix:
    ``[prefix | pad | remainder]``, positions counting real tokens only (as ``generate`` derives them from
    the mask), the pads masked out; then the cache is forked to the chunk's rows (a group's K copies).
    Returns (cache, attention mask (rows, cached width), last prompt tokens (rows,), their positions (rows,)).
    """
    from transformers import DynamicCache

    keyword = cache_keyword(model)
    unique: dict[tuple[int, ...], int] = {}
    rows = [unique.setdefault(tuple(p), len(unique)) for p in chunk]
    prompts = [list(p) for p in unique]
    p = common_prefix_length(prompts) if len(prompts) > 1 else 0
    tails = [q[p:-1] for q in prompts]
    width = max(len(t) for t in tails)
    cache = DynamicCache(config=model.config)
    prefix = torch.tensor([prompts[0][:p]], device=device)
    if p:
        model(
            input_ids=prefix,
            position_ids=torch.arange(p, device=device)[None],
            **{keyword: cache},
            use_cache=True,
            logits_to_keep=1,
        )
        cache.batch_select_indices(torch.zeros(len(prompts), dtype=torch.long, device=device))
    mask = torch.zeros(len(prompts), p + width, dtype=torch.long)
    mask[:, :p] = 1
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    for i, tail in enumerate(tails):
        if tail:
            ids[i, width - len(tail) :] = torch.tensor(tail)
            mask[i, p + width - len(tail) :] = 1
    mask = mask.to(device)
    if width:
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, p:]
        model(
            input_ids=ids.to(device),
            attention_mask=mask,
            position_ids=positions,
            **{keyword: cache},
            use_cache=True,
            logits_to_keep=1,
        )
    index = torch.tensor(rows, device=device)
    if len(prompts) < len(chunk) and (p or width):  # (nothing cached: one-token prompts)
        cache.batch_select_indices(index)
    last = torch.tensor([q[-1] for q in prompts], device=device)[index]
    return cache, mask[index], last, mask[index].sum(-1)


def decode(
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
    start: Callable | None = None,
    keep: RowKept | None = None,
) -> list[list[int]]:
    """Each prompt's new tokens, up to and including its first stop id (at most ``params.max_new_tokens``).
    ``logprobs`` (one empty list per prompt; sampling only): filled with each drawn token's log-prob under
    the warped distribution it was drawn from (the same tokens with or without it). ``draw_with``: ``inverse_cdf``
    or ``multinomial`` (module docstring); with ``params.seeds``, each row's keyed draws (``keyed_draws.py``).
    ``start``: what builds the first cache, ``prefill``'s contract (the turn cache's kept conversations,
    ``rollout/turn_cache.py``); ``keep``: called for each row as it ends (stop or cap) with its cache (``RowKept``)."""
    if draw_with not in DRAWS:
        raise ValueError(f"draw_with: {draw_with!r}; expected one of {', '.join(DRAWS)}")
    keyword = cache_keyword(model)
    cache, mask, tokens, positions = (start or prefill)(model, chunk, pad, device)
    reserve(cache, params.max_new_tokens)  # each step writes its keys and values in place (speed/kv_room.py)
    rows, generated = len(chunk), 0
    out: list[list[int]] = [[] for _ in chunk]
    alive = list(range(rows))  # the chunk's rows still decoding, in order: row j of the batch is alive[j]
    stop_ids = torch.tensor(stops, device=device)
    seeds = None if params.seeds is None or params.greedy else torch.tensor(params.seeds, device=device)  # (keyed)
    for step in range(params.max_new_tokens):
        mask = torch.cat([mask, mask.new_ones(len(alive), 1)], dim=1)
        draws = None if seeds is None else keyed_uniform(seeds[alive], step)  # each row's own stream
        chosen = _next_tokens(
            model, tokens, mask, positions, {keyword: cache}, warpers, params, draw_with, alive, rows, logprobs, draws
        )
        generated += len(alive)
        ended = torch.isin(chosen, stop_ids)
        for row, token in zip(alive, chosen.tolist()):
            out[row].append(token)
        if bool(ended.any()):
            if keep is not None:
                for j in ended.nonzero().flatten().tolist():
                    keep(alive[j], out[alive[j]], cache, j, mask[j])
            live = (~ended).nonzero().flatten()
            alive = [alive[j] for j in live.tolist()]
            if not alive:
                _report(progress, rows, rows, generated)
                break
            cache.batch_select_indices(live)
            mask, chosen, positions = mask[live], chosen[live], positions[live]
        if step + 1 < params.max_new_tokens:
            _report(progress, rows - len(alive), rows, generated)
        tokens, positions = chosen, positions + 1
    else:  # the cap: every row is done
        if keep is not None:
            for j, row in enumerate(alive):
                keep(row, out[row], cache, j, mask[j])
        _report(progress, rows, rows, generated)
    return out


def _next_tokens(
    model, tokens, mask, positions, cache_kwargs, warpers, params, draw_with, alive, rows, logprobs, draws=None
):
    """One decode step: the live rows' logits, warped as ``generate`` warps them, then the argmax or a draw
    (and each drawn token's log-prob under the warped distribution, where asked). ``draws``: the live rows' keyed
    uniform numbers (``params.seeds``), inverted as ``inverse_cdf`` inverts torch's."""
    logits = (
        model(
            input_ids=tokens[:, None],
            attention_mask=mask,
            position_ids=positions[:, None],
            **cache_kwargs,
            use_cache=True,
        )
        .logits[:, -1]
        .to(dtype=torch.float32)
    )
    for warp in warpers:  # as generate: the warpers see the scores only (no input ids needed)
        logits = warp(None, logits)
    if params.greedy:
        return torch.argmax(logits, dim=-1)
    probs = torch.softmax(logits, dim=-1)
    keyed_or_inverse = draws is not None or draw_with == "inverse_cdf"  # (draws None: torch's stream)
    chosen = draw_inverse_cdf(probs, draws) if keyed_or_inverse else draw(probs, alive, rows)
    if logprobs is not None:
        picked = torch.log_softmax(logits, dim=-1).gather(1, chosen[:, None]).squeeze(1)
        for row, value in zip(alive, picked.tolist()):
            logprobs[row].append(value)
    return chosen


DRAWS = ("inverse_cdf", "multinomial")


def draw_inverse_cdf(probs: torch.Tensor, uniform: torch.Tensor | None = None) -> torch.Tensor:
    """One index per row of ``probs`` (rows, vocab), index i with probability probs[i] / sum(probs): the
    first i whose cumulative sum exceeds u * sum, u uniform on [0, 1). One random number per row; the sum in
    float64 so that a token's share is its probability to ~1e-16, not to float32's ~1e-7 over 150k entries.
    u * sum is kept strictly below the sum, so the index found always has a positive probability (an entry
    that top-k / top-p zeroed adds nothing to the sum and can never be the first to exceed it)."""
    cdf = probs.cumsum(dim=-1, dtype=torch.float64)
    total = cdf[:, -1:]
    if not bool(torch.isfinite(total).all()) or bool((total <= 0).any()):
        raise RuntimeError("probability tensor contains inf, nan or no positive entry")
    if uniform is None:
        uniform = torch.rand(total.shape, dtype=torch.float64, device=probs.device)
    u = uniform.reshape(total.shape).to(torch.float64) * total
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, u, right=True).squeeze(1)


def draw(probs: torch.Tensor, alive: list[int], rows: int) -> torch.Tensor:
    """``torch.multinomial(probs, 1)`` on the live rows, drawn on the whole chunk's shape: torch draws one
    exponential per element of the (rows, vocab) tensor, so the live rows get the same draws as in
    ``generate``, which keeps sampling the finished rows."""
    if len(alive) == rows:
        return torch.multinomial(probs, num_samples=1).squeeze(1)
    whole = probs.new_full((rows, probs.shape[1]), 1.0 / probs.shape[1])
    index = torch.tensor(alive, device=probs.device)
    whole[index] = probs
    return torch.multinomial(whole, num_samples=1).squeeze(1)[index]


def _report(progress: StepProgress | None, done: int, rows: int, generated: int) -> None:
    if progress is not None:
        progress(done, rows, generated)
