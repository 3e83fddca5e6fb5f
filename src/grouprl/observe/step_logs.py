"""Observers of a training step: the rollout and trajectory JSONL, built from the step's records
(episodes, their scores, the advantage record). Written by the main process only."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from grouprl.observe.jsonl import JsonlAppender
from grouprl.records import Episode


def rollout_records(step: int, episodes: list[Episode], advantages) -> Iterator[dict]:
    """One line per episode (its first step's prompt and completion, its score and advantage)."""
    first = 0
    for ep in episodes:
        s = ep.steps[0]
        yield {
            "step": step, "prompt_id": ep.prompt_id, "group": ep.group_id, "prompt": s.prompt_text,
            "completion": s.action_text, "prediction": ep.prediction,
            "ground_truth": ep.row.get("ground_truth"), "reward": ep.score, "rewards": ep.reward_parts,
            "correct": ep.correct, "advantage": float(advantages.advantage[first]), "truncated": s.truncated,
            "reward_errors": ep.reward_errors, "reward_reasons": ep.reward_reasons,
            "episode_length": len(ep.steps),
        }
        first += len(ep.steps)


def trajectory_records(step: int, episodes: list[Episode], advantages) -> Iterator[dict]:
    """Every step of every episode, with what the estimator made of it."""
    j = 0
    for ep in episodes:
        for t, s in enumerate(ep.steps):
            yield {
                "train_step": step, "episode": ep.episode_id, "group": ep.group_id, "seed": ep.seed, "t": t,
                "observation": s.observation, "action": s.action_text, "valid": s.valid,
                "invalid_reason": s.invalid_reason, "env_reward": s.env_reward, "penalty": s.penalty,
                "base_reward": s.reward, "return": float(advantages.returns[j]), "episode_score": ep.score,
                "success": ep.success, "episode_advantage": float(advantages.episode_advantage[j]),
                "step_advantage": float(advantages.step_advantage[j]), "advantage": float(advantages.advantage[j]),
                "anchor_group": int(advantages.anchor[j]), "anchor_group_size": int(advantages.anchor_size[j]),
                "info": s.env_info,
                **(conversation_fields(ep, t) if ep.conversation else {}),
            }
            j += 1


def conversation_fields(ep: Episode, t: int) -> dict:
    """A conversation turn: its parsed calls, the tool messages that answered them, its anchor state, and
    the masked span after it (tool results and template tokens: read by the model, never trained)."""
    s = ep.steps[t]
    after = (len(ep.steps[t + 1].prompt_ids) - len(s.prompt_ids) - len(s.action_ids)) if t + 1 < len(ep.steps) else 0
    return {"tool_calls": s.tool_calls or [], "tool_results": s.tool_results or [], "anchor_state": str(s.anchor_state),
            "generated_tokens": len(s.action_ids), "masked_tokens_after": after,
            "masked_prompt_tokens": len(s.prompt_ids) if t == 0 else 0, "end_reason": ep.end_reason}


def write_trajectories(path: Path, step: int, episodes: list[Episode], advantages) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".jsonl.tmp")  # written whole, then renamed: never a half file
    tmp.unlink(missing_ok=True)
    with JsonlAppender(tmp) as sink:
        sink.write_many(trajectory_records(step, episodes, advantages))
    tmp.replace(path)
