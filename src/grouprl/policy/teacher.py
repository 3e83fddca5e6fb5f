"""A distillation teacher's scores of the student's samples, and the student's full-vocabulary logits.

The teacher is any causal LM with the student's tokenizer (``train/distillation.py`` loads it and checks the
vocabularies). It scores the update's samples once per update, under ``no_grad``, ``chunk`` samples per
forward, on its own device and in its own dtype; the results come back as float32 on the student's device.
Where the model takes a 4-D mask (``grouped_scoring.supports_grouped_scoring``) a group's shared prompt is
scored once per chunk (``grouped_scoring.build_layout``: one row per prompt, the completions after it); a
conversation (``completion_attention``: tool results read, not trained) takes the padded path.

Token log-probs are what ``reverse_kl_reward`` and ``k3`` read; the full-vocabulary logits (N, T, V) are what
``forward_kl`` and ``jsd`` read, for the teacher and, with gradient, for the student (:func:`completion_logits`).
"""

from __future__ import annotations

import torch

from grouprl.policy.grouped_scoring import (
    build_layout,
    grouped_completion_logps,
    predictor_hidden,
    supports_grouped_scoring,
)
from grouprl.policy.scoring import TokenBatch, completion_logps


def completion_logits(model, batch: TokenBatch, temperature: float = 1.0) -> torch.Tensor:
    """(N, T, V) logits / temperature at every completion position (position t predicts completion token t), the
    padded layout [pad..prompt | completion..pad], positions following the attention mask (as the scorer's)."""
    input_ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
    attention = torch.cat([batch.prompt_mask, batch.attention], dim=1)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    T = batch.completion_ids.size(1)
    logits = model(
        input_ids=input_ids, attention_mask=attention, position_ids=positions, logits_to_keep=T + 1, use_cache=False
    ).logits[:, :-1, :]
    return logits / temperature if temperature != 1.0 else logits


def grouped_completion_logits(model, batch: TokenBatch, temperature: float = 1.0) -> torch.Tensor:
    """:func:`completion_logits` with a group's shared prompt run once (the block-mask layout of
    ``grouped_scoring``); 0 at the positions ``completion_mask`` leaves out."""
    N, T = batch.completion_ids.shape
    layout = build_layout(batch)
    head = model.get_output_embeddings()
    out = torch.zeros(N, T, head.weight.size(0), device=batch.completion_ids.device)
    if layout.targets.numel() == 0:
        return out
    logits = head(predictor_hidden(model, layout, head.weight.device)).float()
    if temperature != 1.0:
        logits = logits / temperature
    return out.index_put(tuple(layout.where.to(out.device)), logits.to(out.device))


def _grouped(model, part: TokenBatch) -> bool:
    return part.completion_attention is None and supports_grouped_scoring(model)


@torch.no_grad()
def teacher_logps(model, batch: TokenBatch, temperature: float = 1.0, chunk: int = 16) -> torch.Tensor:
    """(N, T) float32 log pi_T(y_t | x, y_<t) of the batch's completion tokens, on the batch's device (0 where
    ``completion_mask`` is 0 on the grouped path)."""
    device, out = _device(model), []
    for start in range(0, len(batch), chunk):
        part = batch.slice(slice(start, start + chunk)).to(device)
        scorer = grouped_completion_logps if _grouped(model, part) else completion_logps
        out.append(scorer(model, part, temperature)[0].float().to(batch.completion_ids.device))
    return torch.cat(out)


@torch.no_grad()
def teacher_logits(model, batch: TokenBatch, temperature: float = 1.0, chunk: int = 16) -> torch.Tensor:
    """(N, T, V) float32 teacher logits / temperature at the batch's completion positions, on its device."""
    device, out = _device(model), []
    for start in range(0, len(batch), chunk):
        part = batch.slice(slice(start, start + chunk)).to(device)
        scorer = grouped_completion_logits if _grouped(model, part) else completion_logits
        out.append(scorer(model, part, temperature).float().to(batch.completion_ids.device))
    return torch.cat(out)


def _device(model) -> torch.device:
    return next(model.parameters()).device


def same_vocabulary(student_tokenizer, teacher_tokenizer) -> bool:
    """True when both tokenizers map every token to the same id (the teacher's log-probs are then the
    student's tokens')."""
    return student_tokenizer.get_vocab() == teacher_tokenizer.get_vocab()
