"""Per-token log-probs of completions under a model: the one forward pass the loss needs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grouprl.policy.logprobs import scored_entropy, selective_log_softmax, truncate_logits
from grouprl.policy.lm_head import head_scores, supports_chunked_head


@dataclass
class TokenBatch:
    """Prompts left-padded, completions right-padded, side by side: [pad..prompt | completion..pad]."""

    prompt_ids: torch.Tensor  # (B, P)
    prompt_mask: torch.Tensor  # (B, P)
    completion_ids: torch.Tensor  # (B, T)
    completion_mask: torch.Tensor  # (B, T) 1 on completion tokens, eos included (the tokens the loss trains)
    # (B, T) the completion tokens attended to, when they are more than the trained ones: a conversation's
    # tool results and template tokens are read but not trained (train/conversation_samples.py).
    completion_attention: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.prompt_ids.size(0)

    @property
    def attention(self) -> torch.Tensor:
        return self.completion_mask if self.completion_attention is None else self.completion_attention

    def slice(self, idx: slice | torch.Tensor) -> "TokenBatch":
        return TokenBatch(
            self.prompt_ids[idx],
            self.prompt_mask[idx],
            self.completion_ids[idx],
            self.completion_mask[idx],
            None if self.completion_attention is None else self.completion_attention[idx],
        )

    def to(self, device: torch.device) -> "TokenBatch":
        return TokenBatch(
            self.prompt_ids.to(device),
            self.prompt_mask.to(device),
            self.completion_ids.to(device),
            self.completion_mask.to(device),
            None if self.completion_attention is None else self.completion_attention.to(device),
        )


def pack(prompts: list[list[int]], completions: list[list[int]], pad_id: int) -> TokenBatch:
    P = max(len(p) for p in prompts)
    T = max(max(len(c) for c in completions), 1)
    B = len(prompts)
    prompt_ids = torch.full((B, P), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((B, P), dtype=torch.long)
    completion_ids = torch.full((B, T), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((B, T), dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        if p:
            prompt_ids[i, P - len(p) :] = torch.tensor(p)
            prompt_mask[i, P - len(p) :] = 1
        if c:
            completion_ids[i, : len(c)] = torch.tensor(c)
            completion_mask[i, : len(c)] = 1
    return TokenBatch(prompt_ids, prompt_mask, completion_ids, completion_mask)


def completion_logps(
    model,
    batch: TokenBatch,
    temperature: float = 1.0,
    with_entropy: bool | str = False,
    support: tuple[int, float] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(y_t | x, y_<t) for every completion position, logits scaled by 1/temperature.

    Only the last T+1 positions go through the LM head, a chunk of rows at a time (``lm_head.head_scores``:
    the (B, T, V) logits never exist whole, in the forward or the backward) where the model allows it,
    else whole with ``logits_to_keep`` and a chunked log-softmax.
    Positions follow the attention mask, as in ``generate``. ``with_entropy``: True, the
    per-position entropy as a detached metric; "grad", with its gradient (the entropy bonus).
    ``support`` (top_k, top_p): renormalised over the tokens the sampler kept (``truncate_logits``).
    """
    input_ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
    attention = torch.cat([batch.prompt_mask, batch.attention], dim=1)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    T = batch.completion_ids.size(1)
    if supports_chunked_head(model):  # the (B, T, V) logits never exist whole: policy/lm_head.py
        hidden = model.get_decoder()(
            input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=False
        ).last_hidden_state[:, -(T + 1) : -1]
        logps, entropy = head_scores(
            hidden.reshape(-1, hidden.size(-1)),
            model.get_output_embeddings(),
            batch.completion_ids.reshape(-1),
            temperature,
            with_entropy,
            support,
        )
        return logps.view(-1, T), (entropy.view(-1, T) if entropy is not None else None)
    logits = model(
        input_ids=input_ids, attention_mask=attention, position_ids=positions, logits_to_keep=T + 1, use_cache=False
    ).logits[:, :-1, :]
    if temperature != 1.0:
        logits = logits / temperature
    flat = logits.reshape(-1, logits.size(-1))
    if support is not None:
        flat = truncate_logits(flat, batch.completion_ids.reshape(-1), *support)
    logps = selective_log_softmax(flat, batch.completion_ids.reshape(-1)).view(-1, T)
    entropy = scored_entropy(flat, with_entropy).view(-1, T) if with_entropy else None
    return logps, entropy
