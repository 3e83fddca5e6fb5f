"""Held-out evaluation: the same episode runner and the run's scorer, greedy (or sampled), one
episode per row. Learned rewards are frozen meanwhile (``scorer.eval_mode()``).

Single-turn tasks report accuracy (the judge reward is 1.0); environments report the success
rate as ``accuracy`` too, with episode length, invalid-action rate and mean return.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grouprl.observe.jsonl import JsonlAppender
from grouprl.rewards.scorer import Scorer
from grouprl.rollout.generation import GenerationBackend, HFBackend, SamplingParams
from grouprl.rollout.runner import SINGLE_TURN, EpisodeSettings, run_episodes

ENV_CHECK_EPISODES = 32  # sampled training episodes that decide when an environment's SFT stops


def evaluate(backend: GenerationBackend, tokenizer, task, rows: list[dict[str, Any]], params: SamplingParams,
             scorer: Scorer, out_path: str | Path | None = None, settings: EpisodeSettings | None = None,
             pool=None) -> dict[str, float]:
    settings = settings or SINGLE_TURN
    episodes = run_episodes([task.env_factory(row) for row in rows], rows, 1, backend, tokenizer, params,
                            settings=settings, seeds=[task.seed_of(row) for row in rows], pool=pool)
    with scorer.eval_mode():
        scorer.score(episodes)
    n = max(len(episodes), 1)
    new_tokens = [sum(len(s.action_ids) for s in ep.steps) / max(len(ep.steps), 1) for ep in episodes]
    result = {
        "accuracy": sum(ep.correct for ep in episodes) / n,
        "mean_reward": sum(ep.score for ep in episodes) / n,
        "mean_new_tokens": sum(new_tokens) / n,
        "n": len(episodes),
    }
    result.update(task.eval_metrics(episodes))  # the task's own measures (slates: next click, opinion, ...)
    if task.multi_step:
        steps = [s for ep in episodes for s in ep.steps]
        result.update({"success_rate": result["accuracy"],
                       "episode_length": sum(len(ep.steps) for ep in episodes) / n,
                       "invalid_action_rate": sum(not s.valid for s in steps) / max(len(steps), 1)})
    if out_path is not None:
        Path(out_path).unlink(missing_ok=True)
        with JsonlAppender(out_path) as sink:
            for i, ep in enumerate(episodes):
                record = {"index": i, "question": ep.row.get("question"), "completion": ep.steps[-1].action_text,
                          "prediction": ep.prediction, "ground_truth": ep.row.get("ground_truth"),
                          "correct": ep.correct, "reward": ep.score, "new_tokens": new_tokens[i]}
                if task.multi_step:
                    record.update(seed=ep.seed, actions=[s.action_text for s in ep.steps],
                                  valid=[s.valid for s in ep.steps])
                sink.write(record)
    return result


def check_accuracy(task, scorer, rows, params: SamplingParams, settings: EpisodeSettings | None = None):
    """``evaluate`` on a model mid-SFT (the stop rule's measurement)."""
    def measure(model, tokenizer) -> dict[str, float]:
        return evaluate(HFBackend(model, tokenizer, model.device), tokenizer, task, rows, params, scorer,
                        settings=settings)

    return measure
