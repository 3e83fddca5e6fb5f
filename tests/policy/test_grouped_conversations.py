"""Conversation samples through the KV-cache layout: a group's first prompt run once, every later turn on top of
it, tool results read but not trained (``completion_attention``). The same log-probs, entropies and gradients as
the padded path, which runs every sample's prompt again; and the learner takes this layout for conversations."""

from __future__ import annotations

import random

import torch

from grouprl.policy.grouped_scoring import shared_prefix_logps
from grouprl.policy.scoring import TokenBatch, completion_logps, pack
from test_grouped_scoring import EOS, PAD, VOCAB, grads_of, tiny_model


def conversations(seed: int, groups: int = 2, k: int = 4) -> TokenBatch:
    """K conversations per first prompt: generated turns (trained) between tool results (read, not trained)."""
    rng = random.Random(seed)
    prompts, tails, trained = [], [], []
    for _ in range(groups):
        prompt = [rng.randrange(2, VOCAB) for _ in range(rng.randint(6, 14))]
        for _ in range(k):
            tail, mask = [], []
            for turn in range(rng.randint(1, 3)):
                if turn:  # a tool result and the template around it
                    result = [rng.randrange(2, VOCAB) for _ in range(rng.randint(2, 6))]
                    tail, mask = tail + result, mask + [0] * len(result)
                said = [rng.randrange(2, VOCAB) for _ in range(rng.randint(1, 5))] + [EOS]
                tail, mask = tail + said, mask + [1] * len(said)
            prompts.append(prompt)
            tails.append(tail)
            trained.append(mask)
    batch = pack(prompts, tails, PAD)
    loss_mask = torch.zeros_like(batch.completion_mask)
    for row, mask in enumerate(trained):
        loss_mask[row, : len(mask)] = torch.tensor(mask)
    return TokenBatch(batch.prompt_ids, batch.prompt_mask, batch.completion_ids, loss_mask, batch.completion_mask)


def test_conversations_score_and_train_the_same_through_the_prompt_cache():
    model = tiny_model()
    batch = conversations(seed=4)
    trained = batch.completion_mask.bool()
    assert (batch.attention.bool() & ~trained).any()  # tool results in the middle: read, not trained
    with torch.no_grad():
        ref, ref_h = completion_logps(model, batch, 0.7, with_entropy=True)
        got, got_h = shared_prefix_logps(model, batch, 0.7, with_entropy=True)
    assert float((ref - got)[trained].abs().max()) < 1e-5
    assert float((ref_h - got_h)[trained].abs().max()) < 1e-5
    assert float(got[~trained].abs().max()) == 0.0 and ref[trained].std() > 0.5
    adv = torch.linspace(-1, 1, len(batch))
    loss_ref, g_ref = grads_of(model, completion_logps, batch, adv)
    loss_got, g_got = grads_of(model, shared_prefix_logps, batch, adv)
    assert float((loss_ref - loss_got).abs()) < 1e-6
    scale = max(float(g.abs().max()) for g in g_ref.values())
    assert max(float((g_ref[n] - g_got[n]).abs().max()) for n in g_ref) < 1e-5 * max(1.0, scale)


def test_the_learner_scores_conversations_through_the_prompt_cache():
    from types import SimpleNamespace

    from grouprl.policy.scoring import completion_logps as padded
    from grouprl.run_config import build_config
    from grouprl.train.learner import Learner

    model = tiny_model()
    tokenizer = SimpleNamespace(pad_token_id=PAD)
    policy = SimpleNamespace(model=model, tokenizer=tokenizer, device=torch.device("cpu"))
    for flags, expected in (({}, shared_prefix_logps), ({"gradient_checkpointing": True}, padded)):
        learner = Learner(build_config(None, {"device": "cpu", **flags}, environ={}), policy)
        assert learner.score_conversations is expected
