"""Completion log-probs and entropies from hidden states through the LM head, a chunk of rows at a time.

With a 49k-151k vocabulary the (rows, vocab) logits of an update dominate its memory (trl#3678): for
SmolLM2's 49,152 tokens, 16 completions of 512 tokens are 1.6 GB of float32 logits, kept whole from the
forward for the backward. Here each chunk of ``LM_HEAD_CHUNK`` rows is pushed through the head, reduced
to the picked token's log-prob (and the entropy) and dropped; under autograd each chunk is a checkpoint,
so the backward makes that chunk's logits again instead of keeping every chunk's from the forward. The
peak is one chunk's logits; the price is a second head matmul per chunk in the backward.

Used where the model's logits are exactly ``head(last hidden state)`` (``supports_chunked_head``); other
models (logit soft-capping or scaling, a model wrapped by DDP/FSDP whose hooks need its own forward) keep
the whole-logits path.
"""

from __future__ import annotations

from typing import TypeGuard

import torch
from torch.utils.checkpoint import checkpoint

from grouprl.policy.fused_head import fused_head_scores
from grouprl.policy.logprobs import scored_entropy, selective_log_softmax, truncate_logits
from grouprl.speed.onednn_linear import OneDNNLinear

LM_HEAD_CHUNK = 512  # rows per chunk: 512 x 49,152 float32 logits = 100 MB (151k vocabulary: 310 MB)
# On the CPU the fused head keeps its chunks' log-softmax from the forward for the backward up to this size
# instead of making them again (the head's matmul over again: ~3 s of a GSM8K-shaped update on 2 cores, whose
# 2,048 x 151,936 floats are 1.24 GB); larger updates make them again, so that a job's peak memory (the agent
# main job's 8 GB budget) does not grow with its batch. An accelerator's memory is the scarcer of the two, so
# there the chunks are always made again.
KEEP_ON_CPU_BYTES = 3 << 29  # 1.5 GiB
_AFTER_HEAD = ("final_logit_softcapping", "logit_scale", "logits_scaling")  # config keys that change logits


def supports_chunked_head(model) -> bool:
    """True where ``model(...).logits == model.get_output_embeddings()(model.get_decoder()(...).last_hidden_state)``."""
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, (FSDPModule, torch.nn.parallel.DistributedDataParallel)):
        return False
    try:
        decoder, head = model.get_decoder(), model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return False
    if decoder is None or head is None or decoder is model:
        return False
    config = model.config
    return not any(getattr(config, key, None) not in (None, 1, 1.0) for key in _AFTER_HEAD)


def head_scores(
    hidden: torch.Tensor,
    head: torch.nn.Module,
    targets: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool | str = False,
    support: tuple[int, float] | None = None,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log pi(target), entropy or None) per row of ``hidden`` (N, H): logits = head(hidden) / temperature,
    renormalised over ``support`` (top_k, top_p) when given, ``chunk`` (default ``LM_HEAD_CHUNK``) rows at a time."""
    chunk = chunk or LM_HEAD_CHUNK
    if support is None and with_entropy != "grad" and _plain_linear(head):
        keep = hidden.device.type == "cpu" and hidden.size(0) * head.weight.size(0) * 4 <= KEEP_ON_CPU_BYTES
        return fused_head_scores(hidden, head, targets, temperature, bool(with_entropy), chunk, keep=keep)

    def score(h: torch.Tensor, ids: torch.Tensor):
        logits = head(h)
        if temperature != 1.0:
            logits = logits / temperature
        if support is not None:
            logits = truncate_logits(logits, ids, *support)
        logp = selective_log_softmax(logits, ids)
        return logp, (scored_entropy(logits, with_entropy) if with_entropy else None)

    remember = torch.is_grad_enabled() and hidden.requires_grad and hidden.size(0) > chunk
    parts = [
        checkpoint(score, h, ids, use_reentrant=False) if remember else score(h, ids)
        for h, ids in zip(hidden.split(chunk), targets.split(chunk))
    ]
    logps = torch.cat([p[0] for p in parts])
    return logps, (torch.cat([p[1] for p in parts]) if with_entropy else None)


def _plain_linear(head: torch.nn.Module) -> TypeGuard[torch.nn.Linear]:
    """A bare ``nn.Linear`` (not a LoRA or quantised subclass; ``OneDNNLinear`` is ``F.linear`` outside generation)
    with no hooks: the fused path computes exactly it."""
    return type(head) in (torch.nn.Linear, OneDNNLinear) and not (head._forward_hooks or head._forward_pre_hooks)
