"""The JSONL records of episodes: one schema for a scored episode (:func:`episode_record`, used by the
rollout log and both evaluations) and the per-step trajectory records, built from the step's records
(episodes, their verdicts, the advantage record). Written by the main process only."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterator

from grouprl.observe.jsonl import JsonlAppender
from grouprl.records import Episode, Verdict


def episode_record(ep: Episode, verdict: Verdict, multi_step: bool = False) -> dict:
    """One scored episode as every JSONL of episodes writes it (rollouts, held-out evaluation, periodic
    evaluation): the one schema ``docs/observability.md`` documents. Multi-step episodes add their actions."""
    first, last = (ep.steps[0], ep.steps[-1]) if ep.steps else (None, None)
    record = {
        "episode": ep.episode_id,
        "group": ep.group_id,
        "prompt_id": ep.prompt_id,
        "seed": ep.seed,
        "question": ep.row.get("question"),
        "prompt": first.prompt_text if first else "",
        "completion": last.action_text if last else "",
        "prediction": verdict.prediction,
        "ground_truth": ep.row.get("ground_truth"),
        "reward": verdict.score,
        "rewards": verdict.parts,
        "correct": verdict.correct,
        "reward_errors": verdict.errors,
        "reward_reasons": verdict.reasons,
        "truncated": bool(last and last.truncated),
        "episode_length": len(ep.steps),
        "new_tokens": sum(len(s.action_ids) for s in ep.steps) / max(len(ep.steps), 1),
    }
    if multi_step or len(ep.steps) > 1:
        record.update(actions=[s.action_text for s in ep.steps], valid=[s.valid for s in ep.steps])
    if ep.conversation and first is not None:
        record["messages"] = conversation_record(ep)
    if ep.agent is not None:  # played by the user's agent: calls, samples, failure, refused requests, latency
        record["agent"] = dataclasses.asdict(ep.agent)
    if any(s.policy_version is not None for s in ep.steps):  # asynchronous rollouts, agents: each step's weights
        record["policy_versions"] = [s.policy_version for s in ep.steps]
    return record


def conversation_record(ep: Episode) -> list[dict]:
    """A conversation episode whole: its first prompt's messages, then every turn as the model wrote it
    (with the calls read from it) followed by the tool messages that answered (each with its error kind)."""
    messages = [dict(m) for m in ep.steps[0].messages or []]
    for step in ep.steps:
        turn: dict = {"role": "assistant", "content": step.action_text}
        if step.tool_calls:
            turn["tool_calls"] = step.tool_calls
        messages += [turn] + [dict(result) for result in step.tool_results or []]
    return messages


def rollout_records(
    step: int,
    episodes: list[Episode],
    verdicts: list[Verdict],
    advantages,
    multi_step: bool = False,
    token_signal: list | None = None,
) -> Iterator[dict]:
    """One line per episode: its record, the training step and the advantage of its first step; under
    on-policy distillation, ``distill_tokens``: its trained tokens as ``[text, student, teacher log-prob]``."""
    first, signals = 0, episode_token_signal(episodes, token_signal)
    for ep, verdict, signal in zip(episodes, verdicts, signals):
        record = {
            "step": step,
            **episode_record(ep, verdict, multi_step),
            "advantage": float(advantages.advantage[first]),
        }
        if signal is not None:
            record["distill_tokens"] = signal
        yield record
        first += len(ep.steps)


def episode_token_signal(episodes: list[Episode], token_signal: list | None) -> list[list | None]:
    """The learner's per-sample token signal regrouped per episode: a conversation is one sample, any other
    episode one sample per step (joined in order). The samples are this process's share, the first episodes
    (process 0 writes the logs); episodes past it get ``None``."""
    out: list[list | None] = []
    k, signal = 0, token_signal or []
    for ep in episodes:
        n = 1 if ep.conversation else len(ep.steps)
        out.append([t for sample in signal[k : k + n] for t in sample] if k + n <= len(signal) else None)
        k += n
    return out


def trajectory_records(step: int, episodes: list[Episode], verdicts: list[Verdict], advantages) -> Iterator[dict]:
    """Every step of every episode, with what the estimator made of it."""
    j = 0
    for ep, verdict in zip(episodes, verdicts):
        for t, s in enumerate(ep.steps):
            yield {
                "train_step": step,
                "episode": ep.episode_id,
                "group": ep.group_id,
                "seed": ep.seed,
                "t": t,
                "observation": s.observation,
                "action": s.action_text,
                "valid": s.valid,
                "invalid_reason": s.invalid_reason,
                "env_reward": s.env_reward,
                "penalty": s.penalty,
                "base_reward": verdict.step_rewards[t],
                "return": float(advantages.returns[j]),
                "episode_score": verdict.score,
                "success": ep.success,
                "episode_advantage": float(advantages.episode_advantage[j]),
                "step_advantage": float(advantages.step_advantage[j]),
                "advantage": float(advantages.advantage[j]),
                "anchor_group": int(advantages.anchor[j]),
                "anchor_group_size": int(advantages.anchor_size[j]),
                "info": s.env_info,
                **(conversation_fields(ep, t) if ep.conversation else {}),
            }
            j += 1


def conversation_fields(ep: Episode, t: int) -> dict:
    """A conversation turn: its parsed calls, the tool messages that answered them, its anchor state, and
    the masked span after it (tool results and template tokens: read by the model, never trained)."""
    s = ep.steps[t]
    after = (len(ep.steps[t + 1].prompt_ids) - len(s.prompt_ids) - len(s.action_ids)) if t + 1 < len(ep.steps) else 0
    return {
        "tool_calls": s.tool_calls or [],
        "tool_results": s.tool_results or [],
        "anchor_state": str(s.anchor_state),
        "generated_tokens": len(s.action_ids),
        "masked_tokens_after": after,
        "masked_prompt_tokens": len(s.prompt_ids) if t == 0 else 0,
        "end_reason": ep.end_reason,
    }


def write_trajectories(path: Path, step: int, episodes: list[Episode], verdicts: list[Verdict], advantages) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".jsonl.tmp")  # written whole, then renamed: never a half file
    tmp.unlink(missing_ok=True)
    with JsonlAppender(tmp) as sink:
        sink.write_many(trajectory_records(step, episodes, verdicts, advantages))
    tmp.replace(path)
