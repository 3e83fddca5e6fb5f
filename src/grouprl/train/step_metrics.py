"""The metrics of one training step, computed from its records (what metrics.jsonl holds)."""

from __future__ import annotations

import torch

from grouprl.records import Episode
from grouprl.tools.metrics import tool_metrics


def batch_metrics(episodes: list[Episode], scores: torch.Tensor, advantages, group_size: int,
                  reward_keys: list[str], multi_step: bool) -> dict[str, float]:
    grouped = scores.view(-1, group_size)
    steps = [s for ep in episodes for s in ep.steps]
    lengths = torch.tensor([len(s.action_ids) for s in steps], dtype=torch.float32)
    m = {
        "reward": float(scores.mean()),
        "reward_std": float(scores.std()) if scores.numel() > 1 else 0.0,
        "frac_reward_zero_std": float((grouped.amax(dim=1) == grouped.amin(dim=1)).float().mean()),
        "accuracy": sum(ep.correct for ep in episodes) / len(episodes),
        "completions/mean_length": float(lengths.mean()),
        "completions/max_length": float(lengths.max()),
        "completions/clipped_ratio": sum(s.truncated for s in steps) / lengths.numel(),
        # one per step (an episode of n steps is n samples); a conversation is one sample per episode
        "samples": float(len(episodes) if episodes and episodes[0].conversation else lengths.numel()),
        "prompts/truncated": sum(s.prompt_truncated for s in steps) / lengths.numel(),  # cut to max_prompt_length
    }
    if multi_step:
        n_steps = max(len(steps), 1)
        m.update({
            "success_rate": sum(ep.success for ep in episodes) / len(episodes),
            "episode_length": sum(len(ep.steps) for ep in episodes) / len(episodes),
            "invalid_action_rate": sum(not s.valid for s in steps) / n_steps,
            "anchor_nonsingleton_share": int((advantages.anchor_size > 1).sum()) / n_steps,
            "step_advantage_abs": sum(abs(v) for v in advantages.step_advantage.tolist()) / n_steps,
        })
    m.update(tool_metrics(episodes))  # conversation episodes: tools/invalid_call_rate, errors, end reasons
    for key in reward_keys:
        vals = torch.tensor([ep.reward_parts[key] for ep in episodes if ep.reward_parts.get(key) is not None])
        if vals.numel():
            short = key.rsplit(":", 1)[-1]  # 'path/to/file.py:fn' -> 'fn'
            m[f"rewards/{short}/mean"] = float(vals.mean())
            m[f"rewards/{short}/std"] = float(vals.std()) if vals.numel() > 1 else 0.0
    return m
