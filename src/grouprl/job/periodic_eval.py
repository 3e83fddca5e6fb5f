"""Evaluation every ``eval_steps`` during training, and the best checkpoint by a chosen metric.

An observer of the trainer (it never runs inside the step). Every ``eval_steps`` it evaluates
the policy on a seeded subset of the held-out rows (``max_eval_samples``), sampling
``num_generations_eval`` completions per prompt (one greedy completion when that is 1 and
``eval_greedy``), and logs, beside the training metrics in ``metrics.jsonl``:

- ``eval/accuracy``: share of completions the task's judge calls correct (pass@1 averaged);
- ``eval/pass@k``: share of prompts with at least one correct completion among k =
  ``num_generations_eval`` (Chen et al. 2021, "Evaluating Large Language Models Trained on
  Code": pass@k = E[1 - C(n-c, k) / C(n, k)]; with n = k samples this is "any correct");
- ``eval/reward`` and ``eval/rewards/<name>/mean``: mean episode score and mean of each reward;
- ``eval/completions/mean_length``: mean completion length in tokens;
- every other measure of the one evaluation (``job/evaluate.py``), under ``eval/``.

Per-example results go to ``eval/step_<N>.jsonl``. When ``metric_for_best_model`` improves, a
checkpoint of that step is saved (if none is) and recorded in ``best_checkpoint.json`` and the
run state, so checkpoint rotation never deletes it.
"""

from __future__ import annotations

import json
from dataclasses import asdict
import logging
import random
from pathlib import Path
from typing import Any

from grouprl.config import ConfigError
from grouprl.train.run_state import BestCheckpoint, StepView
from grouprl.rollout.generation import SamplingParams
from grouprl.train.parallel import broadcast_object
from grouprl.job.observer import TrainObserver

log = logging.getLogger(__name__)
BEST = "best_checkpoint.json"


def eval_subset(rows: list[dict[str, Any]], max_samples: int | None, seed: int) -> list[dict[str, Any]]:
    """A seeded subset of ``max_samples`` rows (all rows, in order, when empty or large enough)."""
    if not max_samples or max_samples >= len(rows):
        return list(rows)
    picked = sorted(random.Random(seed).sample(range(len(rows)), max_samples))
    return [rows[i] for i in picked]


class PeriodicEval(TrainObserver):
    """The observer: ``after_step`` evaluates every ``eval_steps`` and tracks the best checkpoint."""

    def __init__(self, cfg, sink, eval_rows: list[dict[str, Any]]):
        evaluation = cfg.eval
        self.cfg, self.sink, self.eval_rows = cfg, sink, eval_rows
        self.every = evaluation.eval_steps if evaluation.eval_strategy == "steps" else 0
        self.k = evaluation.num_generations_eval
        self.metric = (
            evaluation.metric_for_best_model
            if evaluation.metric_for_best_model.startswith("eval/")
            else f"eval/{evaluation.metric_for_best_model}"
        )
        self.greater = evaluation.greater_is_better
        self.rows: list[dict[str, Any]] | None = None

    def params(self) -> SamplingParams:
        params = SamplingParams.for_eval(self.cfg)
        if self.k > 1:  # k different answers need sampling
            params.greedy = False
        return params

    def after_step(self, view: StepView, step: int, metrics: dict[str, float]) -> None:
        if not self.every or step % self.every:
            return
        if self.rows is None:
            self.rows = eval_subset(self.eval_rows, self.cfg.eval.max_eval_samples, self.cfg.train.seed)
        if not self.rows:
            log.warning("eval_steps: the task has no held-out rows (dataset_test_split / test_split_size); skipped")
            self.every = 0
            return
        out_path = view.out / "eval" / f"step_{step:06d}.jsonl" if view.is_main else None
        result = {
            f"eval/{name}": value for name, value in view.evaluate(self.rows, self.k, self.params(), out_path).items()
        }
        # Several processes sample different answers: process 0's result decides the best step
        # everywhere, so every process takes part in the (collective) checkpoint of that step or none does.
        result = broadcast_object(result)
        self.sink.log(step, result)
        self._track_best(view, step, result)

    def _track_best(self, view: StepView, step: int, result: dict[str, float]) -> None:
        if self.metric not in result:
            raise ConfigError(f"metric_for_best_model '{self.metric}' is not an eval metric; they are {sorted(result)}")
        value = result[self.metric]
        best = view.run_state.best
        better = best is None or (value > best.value if self.greater else value < best.value)
        if not better:
            return
        path = view.out / f"checkpoint-{step}"
        view.run_state.best = BestCheckpoint(step, self.metric, value, str(path))
        view.checkpoint()  # the best is always a real checkpoint (saved once per step; observers see it)
        if view.is_main:
            (view.out / BEST).write_text(json.dumps(asdict(view.run_state.best), indent=2))
        log.info("best checkpoint so far: %s (%s = %.4f)", path, self.metric, value)


def best_step(out_dir: str | Path) -> int | None:
    path = Path(out_dir) / BEST
    return json.loads(path.read_text())["step"] if path.is_file() else None
