"""Evaluation, the one path: the run's episode runner and scorer, ``k`` episodes per held-out row, greedy
(or sampled), learned rewards frozen meanwhile (``scorer.eval_mode()``). The before/after evaluation
(greedy, k = 1), ``grouprl eval`` and the periodic evaluation (``job/periodic_eval.py``, pass@k) all
call :func:`evaluate`; its measures are training's (``train/step_metrics.outcome_metrics``) and its
per-episode records the rollout log's (``observe/step_logs.episode_record``).

Single-turn tasks report accuracy (the judge reward is 1.0); environments report the success
rate as ``accuracy`` too, with episode length and invalid-action rate.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from grouprl.observe.jsonl import JsonlAppender
from grouprl.observe.step_logs import episode_record
from grouprl.rewards.scorer import Scorer
from grouprl.rollout.conversation import ConversationSettings
from grouprl.rollout.generation import GenerationBackend, HFBackend, SamplingParams
from grouprl.rollout.runner import SINGLE_TURN, EpisodeSettings, run_episodes
from grouprl.train.step_metrics import outcome_metrics

ENV_CHECK_EPISODES = 32  # sampled training episodes that decide when an environment's SFT stops


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k) (Chen et al. 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def evaluate(
    backend: GenerationBackend,
    tokenizer,
    task,
    rows: list[dict[str, Any]],
    params: SamplingParams,
    scorer: Scorer,
    out_path: str | Path | None = None,
    settings: EpisodeSettings | ConversationSettings | None = None,
    pool=None,
    k: int = 1,
    progress: Callable[[int, int, int], None] | None = None,
) -> dict[str, float]:
    """``k`` episodes per row, scored; the outcome measures, ``pass@k`` and the task's own measures.
    ``out_path``: one record per episode (replaced, never appended to). ``progress(rows done, rows,
    tokens generated)``: called from inside the batched generation (the hf backend, after each decode
    step) and once at the end (``job/progress.py``); the rows are generated in one batch either way."""
    if progress is not None:  # k episodes per row: rows done = sequences done // k
        params = replace(params, progress=lambda done, total, tokens: progress(done // k, len(rows), tokens))
    episodes = run_episodes(
        [task.env_factory(row) for row in rows],
        rows,
        k,
        backend,
        tokenizer,
        params,
        settings=settings or SINGLE_TURN,
        seeds=[task.seed_of(row) for row in rows],
        pool=pool,
    )
    if progress is not None:
        progress(len(rows), len(rows), sum(len(step.action_ids) for ep in episodes for step in ep.steps))
    with scorer.eval_mode():
        verdicts = scorer.score(episodes).verdicts
    result = outcome_metrics(episodes, verdicts, scorer.part_keys, task.multi_step)
    groups = [verdicts[g * k : (g + 1) * k] for g in range(len(rows))]
    result[f"pass@{k}"] = sum(pass_at_k(k, sum(v.correct for v in grp), k) for grp in groups) / max(len(rows), 1)
    result.update({"n": len(episodes), "n_prompts": len(rows)})
    result.update(task.eval_metrics(episodes))  # the task's own measures (slates: next click, opinion, ...)
    if out_path is not None:
        Path(out_path).unlink(missing_ok=True)
        with JsonlAppender(out_path) as sink:
            for i, (ep, verdict) in enumerate(zip(episodes, verdicts)):
                sink.write({"index": i, **episode_record(ep, verdict, task.multi_step)})
    return result


def check_accuracy(
    task, scorer, rows, params: SamplingParams, settings: EpisodeSettings | ConversationSettings | None = None
):
    """``evaluate`` on a model mid-SFT (the stop rule's measurement)."""

    from grouprl.rollout.turn_cache import TurnCache

    def measure(model, tokenizer) -> dict[str, float]:
        # conversations keep their KV caches across turns and share their system prompt's (as in training)
        cache = TurnCache() if isinstance(settings, ConversationSettings) else None
        backend = HFBackend(model, tokenizer, model.device, turn_cache=cache)
        return evaluate(backend, tokenizer, task, rows, params, scorer, settings=settings)

    return measure
