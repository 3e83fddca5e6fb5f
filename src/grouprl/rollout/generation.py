"""Batched sampling with HF ``generate`` (KV cache), recording the completion token ids."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SamplingParams:
    max_new_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    greedy: bool = False
    batch_size: int = 256


@dataclass
class Completion:
    ids: list[int]  # up to and including the first eos
    text: str
    truncated: bool  # no eos within max_new_tokens


@torch.inference_mode()
def generate(model, tokenizer, prompt_ids: list[list[int]], params: SamplingParams,
             device: torch.device) -> list[Completion]:
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id
    was_training = model.training
    model.eval()
    out: list[Completion] = []
    for start in range(0, len(prompt_ids), params.batch_size):
        chunk = prompt_ids[start : start + params.batch_size]
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(chunk):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        kwargs = dict(max_new_tokens=params.max_new_tokens, do_sample=not params.greedy, eos_token_id=eos,
                      pad_token_id=pad, use_cache=True)
        if not params.greedy:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or None)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        seqs = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
        rows, cut = [], []
        for row in seqs[:, width:].tolist():
            if eos in row:
                rows.append(row[: row.index(eos) + 1])
                cut.append(False)
            else:
                rows.append([t for t in row if t != pad])
                cut.append(True)
        texts = tokenizer.batch_decode(rows, skip_special_tokens=True)
        out.extend(Completion(r, t, c) for r, t, c in zip(rows, texts, cut))
    if was_training:
        model.train()
    return out
