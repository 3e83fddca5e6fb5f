"""Completion log-probs with one prompt pass per group (the "Prefix Grouper" layout).

The K completions of a GRPO group share one prompt. The padded path
(``scoring.completion_logps``) runs K copies ``[pad..prompt | completion..pad]``; here each
group is one sequence ``[prompt | c_1 | c_2 | ... | c_K | pad..]`` with

- a block attention mask: a prompt token sees the prompt causally; a token of c_k sees the
  whole prompt and the earlier tokens of c_k, never another completion;
- restarted positions: every completion's positions continue from the end of the prompt
  (``p, p+1, ...``), exactly the positions it has in the padded path.

So every completion token sees the same keys at the same (RoPE) positions as in the padded
path and its log-prob, and therefore the gradient, is the same; the prompt is computed once
instead of K times and no padding inside a group is computed at all (technique: Liu et al.,
"Prefix Grouper: Efficient GRPO Training through Shared-Prefix Forward", 2025).

Attention: the model is called with a ready 4-D mask ``(G, 1, L, L)``, which transformers
passes through unchanged to the attention function. ``sdpa`` takes it as a boolean mask
(True = attend) and ``eager`` as an additive float mask (0 / dtype min); other implementations
(flash_attention_2, flex_attention) cannot take a dense 4-D mask, so ``supports_grouped_scoring``
says no and the caller keeps the padded path. The dense mask does not skip the masked blocks:
the attention scores of a group cost L^2 instead of K (p + T)^2, which is small next to the
linear layers saved at these lengths (measured in docs/performance.md).

A second layout, ``shared_prefix_logps``, gets the same numbers through the model's KV cache: the
prompt runs once into a cache whose keys and values keep their gradient, the cache is indexed out
to the K samples, and the completions run on top of it. Its attention costs K T (p + T) per
group instead of (p + K T)^2 and it needs no 4-D mask, so it is the layout for long completions;
``auto_grouped_logps`` (``grouped_layout: auto``) picks the block mask for short ones, where its
single decoder pass wins, and the learner keeps the block mask under gradient checkpointing.

Samples are grouped by identical prompt ids, so any batch works (groups split across
micro-batches, multi-step episodes); a completion whose mask is all zero (e.g. masked as
truncated) is left out of the sequence and gets log-prob 0, as it counts nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grouprl.policy.lm_head import head_scores
from grouprl.policy.scoring import TokenBatch
from grouprl.policy.cache_keyword import cache_keyword

SUPPORTED_ATTENTION = ("sdpa", "eager")


@dataclass
class GroupedLayout:
    """One row per prompt group: ids, positions, segment per position (0 prompt, k+1 completion k, -1 pad),
    and for every kept completion token, the flat row position whose logits predict it."""

    input_ids: torch.Tensor  # (G, L)
    position_ids: torch.Tensor  # (G, L)
    segments: torch.Tensor  # (G, L)
    predictor: torch.Tensor  # (M,) index into the flattened (G * L) positions
    targets: torch.Tensor  # (M,) the token predicted there
    where: torch.Tensor  # (2, M): (sample, t) of each of the M values in the padded (N, T) layout

    def attention_mask(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """(G, 1, L, L): causal, and key in the prompt or in the query's own segment. Pads see earlier pads,
        so no row is empty (an empty softmax row would give NaN). Boolean, or additive float when ``dtype``."""
        L = self.segments.size(1)
        causal = torch.ones(L, L, dtype=torch.bool, device=self.segments.device).tril()
        q, k = self.segments.unsqueeze(2), self.segments.unsqueeze(1)
        allowed = causal & ((k == q) | ((k == 0) & (q >= 0)))
        allowed = allowed.unsqueeze(1)
        if dtype is None:
            return allowed
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
            ~allowed, torch.finfo(dtype).min
        )


def _rows(ids: torch.Tensor, mask: torch.Tensor, name: str, right: bool) -> list[list[int]]:
    """The unpadded token lists of a padded (N, W) batch, checking the mask is one contiguous run."""
    lengths = mask.sum(-1).tolist()
    W = ids.size(1)
    out = []
    for i, (row, n) in enumerate(zip(ids.tolist(), lengths)):
        span = slice(0, n) if right else slice(W - n, W)
        if int(mask[i, span].sum()) != n:
            raise ValueError(
                f"grouped scoring: sample {i}'s {name} mask is not one "
                f"{'leading' if right else 'trailing'} run of ones; expected a padded TokenBatch"
            )
        out.append(row[span])
    return out


def build_layout(batch: TokenBatch) -> GroupedLayout:
    """Group the samples of a TokenBatch by identical prompt and lay each group out as one row."""
    prompts = _rows(batch.prompt_ids, batch.prompt_mask, "prompt", right=False)
    completions = _rows(batch.completion_ids, batch.completion_mask, "completion", right=True)
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (prompt_ids, c) in enumerate(zip(prompts, completions)):
        if c:
            groups.setdefault(tuple(prompt_ids), []).append(i)
    rows: list[list[int]] = []
    positions: list[list[int]] = []
    segments: list[list[int]] = []
    predictor: list[tuple[int, int]] = []  # (row, position) whose logits predict each completion token
    targets: list[int] = []
    where: list[tuple[int, int]] = []  # (sample, token) of each completion token
    for g, (prompt, members) in enumerate(groups.items()):
        if not prompt:
            raise ValueError(
                f"grouped scoring: sample {members[0]} has an empty prompt; the first completion "
                "token needs a prompt position to be predicted from"
            )
        p = len(prompt)
        ids, pos, seg = list(prompt), list(range(p)), [0] * p
        for k, i in enumerate(members, start=1):
            c = completions[i]
            start = len(ids)
            # token t of this completion is predicted by the prompt's last position (t = 0) or by token t - 1
            predictor.extend([(g, p - 1)] + [(g, start + t - 1) for t in range(1, len(c))])
            targets.extend(c)
            where.extend((i, t) for t in range(len(c)))
            ids.extend(c)
            pos.extend(range(p, p + len(c)))
            seg.extend([k] * len(c))
        rows.append(ids)
        positions.append(pos)
        segments.append(seg)
    L = max((len(r) for r in rows), default=1)
    G = len(rows)
    input_ids = torch.zeros(G, L, dtype=torch.long)
    position_ids = torch.zeros(G, L, dtype=torch.long)
    seg_t = torch.full((G, L), -1, dtype=torch.long)
    for g, (r, pos, seg) in enumerate(zip(rows, positions, segments)):
        input_ids[g, : len(r)] = torch.tensor(r)
        position_ids[g, : len(r)] = torch.tensor(pos)
        seg_t[g, : len(r)] = torch.tensor(seg)
    where_t = torch.tensor(where, dtype=torch.long).reshape(-1, 2).T
    flat = torch.tensor([g * L + j for g, j in predictor], dtype=torch.long)
    return GroupedLayout(input_ids, position_ids, seg_t, flat, torch.tensor(targets, dtype=torch.long), where_t)


def _config(model):
    return model.get_decoder().config


def supports_grouped_scoring(model) -> bool:
    """True where the model takes a dense 4-D mask and its logits are the LM head of the final hidden state."""
    try:
        config = _config(model)
        head = model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return False
    softcap = getattr(config, "final_logit_softcapping", None)
    return head is not None and config._attn_implementation in SUPPORTED_ATTENTION and not softcap


def grouped_completion_logps(
    model,
    batch: TokenBatch,
    temperature: float = 1.0,
    with_entropy: bool | str = False,
    support: tuple[int, float] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Same contract as ``scoring.completion_logps``: (N, T) log pi(y_t | x, y_<t) (and entropy), equal to it
    wherever ``batch.completion_mask`` is 1 and 0 elsewhere."""
    device = batch.completion_ids.device
    N, T = batch.completion_ids.shape
    layout = build_layout(batch)
    head = model.get_output_embeddings()
    logps = torch.zeros(N, T, device=device, dtype=torch.float32)
    entropy = torch.zeros(N, T, device=device, dtype=torch.float32) if with_entropy else None
    if layout.targets.numel() == 0:
        return logps + 0.0 * head.weight.sum(), entropy  # keeps backward() valid on an all-masked batch
    picked = predictor_hidden(model, layout, device)
    where = tuple(layout.where.to(device))
    return _place(
        logps, entropy, where, *head_scores(picked, head, layout.targets.to(device), temperature, with_entropy, support)
    )


def predictor_hidden(model, layout, device) -> torch.Tensor:
    """The final hidden state at every position that predicts a completion token, from one decoder pass over the
    block-mask layout (each group's shared prompt once); the caller applies the LM head."""
    head_dtype = model.get_output_embeddings().weight.dtype
    attn = _config(model)._attn_implementation
    mask = layout.attention_mask(None if attn == "sdpa" else head_dtype).to(device)
    hidden = model.get_decoder()(
        input_ids=layout.input_ids.to(device),
        attention_mask=mask,
        position_ids=layout.position_ids.to(device),
        use_cache=False,
    ).last_hidden_state
    return hidden.reshape(-1, hidden.size(-1)).index_select(0, layout.predictor.to(device))


def _place(logps, entropy, where, picked_logps, picked_entropy):
    """The picked rows' values at their (sample, t) places of the padded (N, T) layout."""
    logps = logps.index_put(where, picked_logps)
    if picked_entropy is not None:
        entropy = entropy.index_put(where, picked_entropy)
    return logps, entropy


def shared_prefix_logps(
    model,
    batch: TokenBatch,
    temperature: float = 1.0,
    with_entropy: bool | str = False,
    support: tuple[int, float] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Same contract as ``grouped_completion_logps``, through the model's KV cache instead of a block mask; it also
    takes conversations (``completion_attention``: a group's first prompt once, every later turn on top of it).

    Each distinct prompt (all but its last token) runs once, into a ``DynamicCache`` whose keys and
    values keep their autograd history; the cache's batch dimension is then indexed so that every
    sample holds its prompt's keys and values, and the samples run as ``[last prompt token | completion]``
    on top of it, positions continuing from the prompt. The gradient of a prompt's keys and values is
    the sum over its K copies, as in the padded path. Attention then costs K * T * (p + T) per group
    instead of the block mask's (p + K * T)^2, so long completions stay cheap; the price is that the
    decoder layers must keep the cache, which gradient checkpointing (a re-run of each layer in the
    backward) cannot: the learner uses the block-mask layout then.
    """
    device = batch.completion_ids.device
    N, T = batch.completion_ids.shape
    head = model.get_output_embeddings()
    logps = torch.zeros(N, T, device=device, dtype=torch.float32)
    entropy = torch.zeros(N, T, device=device, dtype=torch.float32) if with_entropy else None
    kept = (batch.completion_mask.sum(-1) > 0).nonzero().squeeze(-1)  # an all-masked completion: not computed
    if kept.numel() == 0:
        return logps + 0.0 * head.weight.sum(), entropy  # keeps backward() valid on an all-masked batch
    # a conversation's completion is every later turn, tool results included: all read, only its turns trained
    lengths = batch.attention.sum(-1)
    prompts = _rows(batch.prompt_ids[kept], batch.prompt_mask[kept], "prompt", right=False)
    _rows(batch.completion_ids[kept], batch.attention[kept], "completion", right=True)
    if min(len(p) for p in prompts) == 0:
        raise ValueError(
            "grouped scoring: a sample has an empty prompt; the first completion token needs a "
            "prompt position to be predicted from"
        )
    ids, mask, group, cache = _prefill_prompts(model, prompts, device)
    decoder = model.get_decoder()
    T_kept = int(lengths[kept].max())
    completion = batch.completion_ids[kept, :T_kept]
    segment = torch.cat([ids[group, -1:], completion[:, :-1]], dim=1)  # token t predicts completion token t
    prompt_len = mask.sum(-1)[group]
    seg_positions = prompt_len.unsqueeze(1) - 1 + torch.arange(T_kept, device=device)
    seg_mask = torch.cat([mask[group, :-1], torch.ones_like(segment)], dim=1)  # right pads come after: unseen
    hidden = decoder(
        input_ids=segment,
        attention_mask=seg_mask,
        position_ids=seg_positions,
        **{cache_keyword(decoder): cache},
        use_cache=True,
    ).last_hidden_state
    real = batch.completion_mask[kept, :T_kept].bool()
    rows, cols = real.nonzero(as_tuple=True)
    return _place(
        logps,
        entropy,
        (kept[rows], cols),
        *head_scores(hidden[real], head, completion[real], temperature, with_entropy, support),
    )


def _prefill_prompts(model, prompts: list[list[int]], device):
    """Each distinct prompt (all but its last token) run once into a ``DynamicCache`` that keeps its autograd
    history, then indexed so that every sample holds its prompt's keys and values. Returns the distinct
    prompts left-padded (ids, mask), each sample's prompt index and the cache."""
    from transformers import DynamicCache

    unique: dict[tuple[int, ...], int] = {}
    group = torch.tensor([unique.setdefault(tuple(p), len(unique)) for p in prompts], device=device)
    width = max(len(p) for p in unique)
    ids = torch.zeros(len(unique), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for g, p in enumerate(unique):
        ids[g, width - len(p) :] = torch.tensor(p)
        mask[g, width - len(p) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    decoder = model.get_decoder()
    cache = DynamicCache(config=_config(model))
    if width > 1:
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        decoder(
            input_ids=ids[:, :-1],
            attention_mask=mask[:, :-1],
            position_ids=positions[:, :-1],
            **{cache_keyword(decoder): cache},
            use_cache=True,
        )
        cache.batch_select_indices(group)
    return ids, mask, group, cache


def layout_costs(model, batch: TokenBatch) -> tuple[float, float]:
    """Estimated FLOPs per decoder layer of (block mask, KV cache) for ``batch``.

    Per token, the linear layers cost 2 * (2 h q + 2 h kv + 3 h i) (q/o, k/v and the gated MLP);
    per attended (query, key) pair, 4 q (scores and values). The block mask runs p + sum T tokens
    per group and attends all (p + sum T)^2 pairs (its mask skips nothing); the cache runs each
    prompt once and N rows padded to the longest completion T_max, each attending W + T_max keys
    (W: the longest prompt), plus ``CACHE_OVERHEAD_TOKENS`` tokens' worth of linear work per sample for
    what FLOPs do not count (each sample's copy of its prompt's keys and values and their summed gradient,
    a second pass of smaller products). With that term this model picked the faster layout in every case
    measured in docs/performance.md ("Two layouts"; tiny and the main job's SmolLM2 batches: block, also
    with every completion at the cap; GSM8K shape with lengths 96-256: block; all 256: cache).
    """
    config = _config(model)
    h = config.hidden_size
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or h // heads
    q, kv = heads * head_dim, (getattr(config, "num_key_value_heads", None) or heads) * head_dim
    inter = getattr(config, "intermediate_size", None) or 4 * h
    per_token, per_pair = 2 * (2 * h * q + 2 * h * kv + 3 * h * inter), 4 * q
    lengths = batch.completion_mask.sum(-1)
    kept = lengths > 0
    if not bool(kept.any()):
        return 0.0, 0.0
    prompts, group = torch.unique(batch.prompt_ids[kept] * batch.prompt_mask[kept], dim=0, return_inverse=True)
    p = batch.prompt_mask[kept].sum(-1).float()
    prompt_len = torch.zeros(len(prompts)).scatter_(0, group.cpu(), p.cpu())  # a group's members agree
    row = prompt_len + torch.zeros(len(prompts)).index_add_(0, group.cpu(), lengths[kept].float().cpu())
    block = per_token * float(row.sum()) + per_pair * float((row**2).sum())
    n, t_max, width = int(kept.sum()), float(lengths.max()), float(prompt_len.max())
    cache = per_token * (float(prompt_len.sum()) + n * (t_max + CACHE_OVERHEAD_TOKENS))
    cache += per_pair * n * t_max * (width + t_max)
    return block, cache


# The KV-cache layout's cost beyond its FLOPs, per sample, in tokens of linear-layer work. Fitted on five shapes
# (bench/levers/scoring.py, 2 threads, fwd+bwd; estimate without it -> measured, block/cache): tiny at T=8
# 1.08 -> 0.87, SmolLM2 (main job) at T=12 1.03 -> 0.91, GSM8K shape at T=256 1.21 -> 1.18, and two uneven
# batches (block both ways); with 3 tokens the estimates are 0.86, 0.88 and 1.20. A constant, not a share of the
# prompt: it was fitted on 2 CPU threads only, and flips only near-ties (no measured choice changed but these).
CACHE_OVERHEAD_TOKENS = 3


def auto_grouped_logps(
    model,
    batch: TokenBatch,
    temperature: float = 1.0,
    with_entropy: bool | str = False,
    support: tuple[int, float] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``grouped_layout: auto`` (without gradient checkpointing): per batch, the layout ``layout_costs``
    estimates cheaper. The block mask wins with short or uneven completions (no padding, one pass),
    the cache with long even ones (its attention grows with K T (p + T), not (p + K T)^2)."""
    block, cache = layout_costs(model, batch)
    scorer = shared_prefix_logps if cache < block else grouped_completion_logps
    return scorer(model, batch, temperature, with_entropy, support)
