"""The measures of scored episodes: :func:`outcome_metrics` (what training and both evaluations share)
and :func:`batch_metrics` (a training step's: the outcome plus what only a rollout batch has)."""

from __future__ import annotations

import torch

from grouprl.records import Episode, Verdict
from grouprl.rewards.scorer import Scores
from grouprl.rollout.agent.runner import agent_metrics
from grouprl.tools.metrics import tool_metrics
from grouprl.train.conversation_samples import episode_chains
from grouprl.user_code import short_name


def outcome_metrics(
    episodes: list[Episode], verdicts: list[Verdict], reward_keys: list[str], multi_step: bool
) -> dict[str, float]:
    """``accuracy`` (share correct: the judge reward is 1.0, or the environment reported success),
    ``reward`` (mean episode score), ``completions/mean_length`` (tokens per action), each reward's
    ``rewards/<name>/mean`` and ``/std`` over the episodes it scored, the environment measures of a
    multi-step task and the tool measures of conversations."""
    n = max(len(episodes), 1)
    steps = [s for ep in episodes for s in ep.steps]
    m = {
        "accuracy": sum(v.correct for v in verdicts) / n,
        "reward": sum(v.score for v in verdicts) / n,
        "completions/mean_length": sum(len(s.action_ids) for s in steps) / max(len(steps), 1),
    }
    if multi_step:
        m.update(
            {
                "success_rate": sum(ep.success for ep in episodes) / n,
                "episode_length": len(steps) / n,
                "invalid_action_rate": sum(not s.valid for s in steps) / max(len(steps), 1),
            }
        )
    m.update(tool_metrics(episodes))  # conversation episodes: tools/invalid_call_rate, errors, end reasons
    m.update(agent_metrics(episodes))  # agent episodes: agent/calls_per_episode, split, failures, latency
    for key in reward_keys:
        vals = torch.tensor([v.parts[key] for v in verdicts if v.parts.get(key) is not None], dtype=torch.float64)
        if vals.numel():
            short = short_name(key)  # 'path/to/file.py:fn' -> 'fn'
            m[f"rewards/{short}/mean"] = float(vals.mean())
            m[f"rewards/{short}/std"] = float(vals.std()) if vals.numel() > 1 else 0.0
    return m


def batch_metrics(
    episodes: list[Episode], scores: Scores, advantages, group_size: int, reward_keys: list[str], multi_step: bool
) -> dict[str, float]:
    grouped = scores.episode.view(-1, group_size)
    steps = [s for ep in episodes for s in ep.steps]
    lengths = torch.tensor([len(s.action_ids) for s in steps], dtype=torch.float32)
    m = outcome_metrics(episodes, scores.verdicts, reward_keys, multi_step)
    m.update(
        {
            "reward": float(scores.episode.mean()),  # in float64, as the advantages see it
            "reward_std": float(scores.episode.std()) if scores.episode.numel() > 1 else 0.0,
            "frac_reward_zero_std": float((grouped.amax(dim=1) == grouped.amin(dim=1)).float().mean()),
            "completions/max_length": float(lengths.max()),
            "completions/clipped_ratio": sum(s.truncated for s in steps) / lengths.numel(),
            # one per step (an episode of n steps is n samples); a conversation is one sample per episode (an
            # agent's, one per chain of calls: train/conversation_samples.py)
            "samples": float(
                sum(len(episode_chains(ep)) for ep in episodes)
                if episodes and episodes[0].conversation
                else lengths.numel()
            ),
            "prompts/truncated": sum(s.prompt_truncated for s in steps) / lengths.numel(),  # cut to max_prompt_length
        }
    )
    if multi_step:
        n_steps = max(len(steps), 1)
        # the first turn's anchor ("start") is shared by the whole group; the later turns are where
        # anchors can group turns taken with the same tool results in hand, or not
        later = torch.tensor([t > 0 for ep in episodes for t in range(len(ep.steps))], dtype=torch.bool)
        m.update(
            {
                "anchor_nonsingleton_share": int((advantages.anchor_size > 1).sum()) / n_steps,
                "anchor_nonsingleton_share_later_turns": (
                    int((advantages.anchor_size[later] > 1).sum()) / max(int(later.sum()), 1)
                ),
                "step_advantage_abs": sum(abs(v) for v in advantages.step_advantage.tolist()) / n_steps,
            }
        )
    return m
