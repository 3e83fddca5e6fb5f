"""Held-out accuracy: the same episode runner, greedy (or sampled), one episode per row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grouprl.observe.jsonl import JsonlAppender
from grouprl.rewards.pipeline import score_episodes
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.runner import run_episodes
from grouprl.tasks.base import SingleTurnEnv, SingleTurnTask


def evaluate(model, tokenizer, task: SingleTurnTask, rows: list[dict[str, Any]], params: SamplingParams,
             device, out_path: str | Path | None = None) -> dict[str, float]:
    episodes = run_episodes(lambda i: SingleTurnEnv(task, rows[i]), rows, 1, model, tokenizer, params, device)
    score_episodes(episodes, task.reward_names, task.reward_weights, task.correct_reward,
                   options=task.reward_options)
    n = len(episodes)
    new_tokens = [len(ep.steps[0].action_ids) for ep in episodes]
    result = {
        "accuracy": sum(ep.correct for ep in episodes) / max(n, 1),
        "mean_reward": sum(ep.score for ep in episodes) / max(n, 1),
        "mean_new_tokens": sum(new_tokens) / max(n, 1),
        "n": n,
    }
    if out_path is not None:
        Path(out_path).unlink(missing_ok=True)
        with JsonlAppender(out_path) as sink:
            sink.write_many(
                {"index": i, "question": ep.row["question"], "completion": ep.steps[0].action_text,
                 "prediction": ep.prediction, "ground_truth": ep.row.get("ground_truth"), "correct": ep.correct,
                 "reward": ep.score, "new_tokens": new_tokens[i]}
                for i, ep in enumerate(episodes)
            )
    return result
