"""Conversation episodes as training samples: one sequence per episode, a loss mask on generated tokens.

A conversation episode's steps share their prefix: step t+1's prompt ids are step t's prompt ids,
its generated ids, then the template's tool-message tokens (``rollout/conversation.py``). So the
last step's prompt plus its action is the whole conversation, and the update scores it once:

    prompt      = the first turn's prompt (system, tools, user)        -- attended, not trained
    completion  = everything after it, in order                        -- attended
    loss mask   = 1 exactly on the ids the engine generated            -- trained

Template tokens between turns and tool results are attended (the model reads them) but never
trained. Each generated token carries its own turn's advantage (GiGPO's per-step credit), so the
advantages are per token, shape (episodes, T). The sampler's log-probs, when the engine reports
them, are placed at the same positions.

An agent's episode (``rollout/agent/runner.py``) is one sample per chain of calls that extend each other:
one when the agent only appended to its chat, several where it rewrote its history; every chain carries
its steps' advantages, so the split calls share the episode's reward.
"""

from __future__ import annotations

import torch

from grouprl.policy.scoring import TokenBatch, pack
from grouprl.records import Episode
from grouprl.rollout.agent.calls import call_segments
from grouprl.train.step_samples import StepSamples


def conversation_layout(episode: Episode, steps: list[int] | None = None) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, completion ids, step index per completion token: -1 where nothing was generated) of the
    episode's steps (``steps``: a chain of them, by index; all of them by default).

    Refuses steps that do not extend each other (a re-tokenised turn would train on ids the model never
    produced)."""
    chain = list(range(len(episode.steps))) if steps is None else steps
    first, last = episode.steps[chain[0]], episode.steps[chain[-1]]
    prompt = first.prompt_ids
    full = last.prompt_ids + last.action_ids
    owner = [-1] * (len(full) - len(prompt))
    for t in chain:
        step = episode.steps[t]
        end = len(step.prompt_ids) + len(step.action_ids)
        if full[:end] != step.prompt_ids + step.action_ids:
            raise ValueError(
                f"episode {episode.episode_id}: turn {t}'s prompt and action are not a prefix of the "
                "conversation (the runner must append generated ids, never re-tokenise them)"
            )
        owner[len(step.prompt_ids) - len(prompt) : end - len(prompt)] = [t] * len(step.action_ids)
    return prompt, full[len(prompt) :], owner


def episode_chains(episode: Episode) -> list[list[int]]:
    """The samples an episode makes: one chain of all its steps; an agent's episode, one per chain of calls
    that extend each other (``rollout/agent_calls.call_segments``: split where the agent rewrote its history)."""
    if episode.agent is None:
        return [list(range(len(episode.steps)))]
    return call_segments(episode.steps)


def pack_conversations(episodes: list[Episode], step_advantages: torch.Tensor, pad_id: int, mask_truncated: bool):
    """One sample per chain of each episode (one per episode outside agent mode); ``step_advantages`` holds
    one value per step of ``episodes``, in order."""

    chains, firsts, first = [], [], 0  # firsts: index of the episode's first step in step_advantages
    for ep in episodes:
        chains += [(ep, chain) for chain in episode_chains(ep)]
        firsts += [first] * len(episode_chains(ep))
        first += len(ep.steps)
    layouts = [conversation_layout(ep, chain) for ep, chain in chains]
    batch = pack([p for p, _, _ in layouts], [c for _, c, _ in layouts], pad_id)
    attention = batch.completion_mask.clone()  # every real token is read
    loss_mask = torch.zeros_like(batch.completion_mask)
    advantages = torch.zeros(batch.completion_ids.shape, dtype=torch.float32)
    sampler = torch.zeros(batch.completion_ids.shape, dtype=torch.float32)
    have_sampler = all(s.logprobs is not None for ep in episodes for s in ep.steps if s.action_ids)
    for row, ((ep, _), (_, _, owner), first) in enumerate(zip(chains, layouts, firsts)):
        seen: dict[int, int] = {}
        for position, t in enumerate(owner):
            if t < 0 or (mask_truncated and ep.steps[t].truncated):
                continue
            loss_mask[row, position] = 1
            advantages[row, position] = float(step_advantages[first + t])
            k = seen[t] = seen.get(t, -1) + 1  # the k-th generated token of turn t
            if have_sampler:
                sampler[row, position] = (ep.steps[t].logprobs or [])[k]  # every step has them (have_sampler)
    batch = TokenBatch(batch.prompt_ids, batch.prompt_mask, batch.completion_ids, loss_mask, attention)
    return StepSamples(batch, advantages, sampler if have_sampler else None)
