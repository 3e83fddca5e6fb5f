"""Evaluation every ``eval_steps`` during training, and the best checkpoint by a chosen metric.

An observer of the trainer (it never runs inside the step). Every ``eval_steps`` it evaluates
the policy on a seeded subset of the held-out rows (``max_eval_samples``), sampling
``num_generations_eval`` completions per prompt (one greedy completion when that is 1 and
``eval_greedy``), and logs, beside the training metrics in ``metrics.jsonl``:

- ``eval/accuracy``: share of completions the task's judge calls correct (pass@1 averaged);
- ``eval/pass@k``: share of prompts with at least one correct completion among k =
  ``num_generations_eval`` (Chen et al. 2021, "Evaluating Large Language Models Trained on
  Code": pass@k = E[1 - C(n-c, k) / C(n, k)]; with n = k samples this is "any correct");
- ``eval/reward`` and ``eval/rewards/<name>``: mean episode score and mean of each reward;
- ``eval/mean_length``: mean completion length in tokens.

Per-example results go to ``eval/step_<N>.jsonl``. When ``metric_for_best_model`` improves, a
checkpoint of that step is saved (if none is) and recorded in ``best_checkpoint.json`` and the
run state, so checkpoint rotation never deletes it.
"""

from __future__ import annotations

import json
import logging
import math
import random
from pathlib import Path
from typing import Any

from grouprl.config import ConfigError
from grouprl.observe.jsonl import JsonlAppender
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.runner import run_episodes
from grouprl.train.parallel import broadcast_object
from grouprl.job.observer import TrainObserver

log = logging.getLogger(__name__)
BEST = "best_checkpoint.json"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def eval_subset(rows: list[dict[str, Any]], max_samples: int | None, seed: int) -> list[dict[str, Any]]:
    """A seeded subset of ``max_samples`` rows (all rows, in order, when empty or large enough)."""
    if not max_samples or max_samples >= len(rows):
        return list(rows)
    picked = sorted(random.Random(seed).sample(range(len(rows)), max_samples))
    return [rows[i] for i in picked]


def evaluate_groups(trainer, rows: list[dict[str, Any]], k: int, params: SamplingParams,
                    out_path: Path | None = None) -> dict[str, float]:
    """Generate k completions per row, score them with the run's scorer (eval mode), and measure."""
    task, scorer = trainer.task, trainer.scorer
    episodes = run_episodes([task.env_factory(r) for r in rows], rows, k, trainer.backend, trainer.policy.tokenizer,
                            params, settings=trainer.settings, seeds=[task.seed_of(r) for r in rows])
    with scorer.eval_mode():
        scorer.score(episodes)
    n = max(len(episodes), 1)
    metrics = {"eval/accuracy": sum(ep.correct for ep in episodes) / n,
               "eval/reward": sum(ep.score for ep in episodes) / n,
               "eval/mean_length": sum(len(s.action_ids) for ep in episodes for s in ep.steps) / n,
               "eval/n_prompts": float(len(rows))}
    for key in scorer.keys:
        values = [ep.reward_parts.get(key) for ep in episodes if ep.reward_parts.get(key) is not None]
        if values:
            metrics[f"eval/rewards/{key}"] = sum(values) / len(values)
    groups = [episodes[g * k:(g + 1) * k] for g in range(len(rows))]
    metrics[f"eval/pass@{k}"] = sum(pass_at_k(k, sum(e.correct for e in grp), k) for grp in groups) / max(len(rows), 1)
    if out_path is not None:
        out_path.unlink(missing_ok=True)
        with JsonlAppender(out_path) as sink:
            for ep in episodes:
                sink.write({"group": ep.group_id, "prompt": ep.steps[0].prompt_text if ep.steps else "",
                            "completion": ep.steps[-1].action_text if ep.steps else "", "correct": ep.correct,
                            "reward": ep.score, "rewards": ep.reward_parts, "ground_truth": ep.row.get("ground_truth")})
    return metrics


class PeriodicEval(TrainObserver):
    """The observer: ``after_step`` evaluates every ``eval_steps`` and tracks the best checkpoint."""

    def __init__(self, cfg, sink):
        evaluation = cfg.eval
        self.cfg, self.sink = cfg, sink
        self.every = evaluation.eval_steps if evaluation.eval_strategy == "steps" else 0
        self.k = evaluation.num_generations_eval
        self.metric = evaluation.metric_for_best_model if evaluation.metric_for_best_model.startswith("eval/") \
            else f"eval/{evaluation.metric_for_best_model}"
        self.greater = evaluation.greater_is_better
        self.rows: list[dict[str, Any]] | None = None

    def params(self) -> SamplingParams:
        params = SamplingParams.for_eval(self.cfg)
        if self.k > 1:  # k different answers need sampling
            params.greedy = False
        return params

    def after_step(self, trainer, step: int, metrics: dict[str, float]) -> None:
        if not self.every or step % self.every:
            return
        if self.rows is None:
            self.rows = eval_subset(trainer.task.eval_rows, self.cfg.eval.max_eval_samples, self.cfg.train.seed)
        if not self.rows:
            log.warning("eval_steps: the task has no held-out rows (dataset_test_split / test_split_size); skipped")
            self.every = 0
            return
        main = trainer.parallel.is_main
        result = evaluate_groups(trainer, self.rows, self.k, self.params(),
                                 trainer.out / "eval" / f"step_{step:06d}.jsonl" if main else None)
        # Several processes sample different answers: process 0's result decides the best step
        # everywhere, so every process takes part in the (collective) checkpoint of that step or none does.
        result = broadcast_object(result)
        self.sink.log(step, result)
        self._track_best(trainer, step, result)

    def _track_best(self, trainer, step: int, result: dict[str, float]) -> None:
        if self.metric not in result:
            raise ConfigError(f"metric_for_best_model '{self.metric}' is not an eval metric; they are {sorted(result)}")
        value = result[self.metric]
        best = trainer.run_state.get("best")
        better = best is None or (value > best["value"] if self.greater else value < best["value"])
        if not better:
            return
        path = trainer.out / f"checkpoint-{step}"
        trainer.run_state["best"] = {"step": step, "metric": self.metric, "value": value, "checkpoint": str(path)}
        trainer.checkpoint()  # the best is always a real checkpoint (saved once per step; observers see it)
        if trainer.parallel.is_main:
            (trainer.out / BEST).write_text(json.dumps(trainer.run_state["best"], indent=2))
        log.info("best checkpoint so far: %s (%s = %.4f)", path, self.metric, value)


def best_step(out_dir: str | Path) -> int | None:
    path = Path(out_dir) / BEST
    return json.loads(path.read_text())["step"] if path.is_file() else None
