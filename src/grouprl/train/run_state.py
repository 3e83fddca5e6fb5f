"""What the loop keeps for the job and shows to it.

:class:`RunState` is the job's memory across a resume (the base model, the evaluation before RL, the
best checkpoint so far, the hub revisions pushed), typed and saved in every checkpoint's
``trainer_state.json`` (under ``extra``). :class:`StepView` is what an observer (``job/observer.py``)
is handed between steps instead of the trainer: the step, its records, the run state it may update,
and the two things it may do: save this step's checkpoint, and evaluate the current policy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable


@dataclass
class BestCheckpoint:
    step: int
    metric: str
    value: float
    checkpoint: str


@dataclass
class RunState:
    base_model: str | None = None  # what RL started from (a reference model on resume, the hub card)
    eval_before: dict[str, float] | None = None  # the held-out evaluation before RL (kept for the summary)
    best: BestCheckpoint | None = None  # by metric_for_best_model (job/periodic_eval.py)
    hub_revisions: Any = None  # what the hub push returned (job/checkpoint_observers.py)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, state: dict[str, Any], where: str = "checkpoint") -> "RunState":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(state) - known)
        if unknown:
            raise ValueError(
                f"{where}: run state has unknown field(s) {', '.join(unknown)}; expected {', '.join(sorted(known))}"
            )
        best = state.get("best")
        return cls(**{**state, "best": BestCheckpoint(**best) if isinstance(best, dict) else best})


# The job's evaluation (job/evaluate.py: evaluate): (backend, tokenizer, task, rows, params, scorer, out_path,
# settings, k=...) -> measures. The trainer binds it to its own backend, scorer and settings for observers.
EvaluateFn = Callable[..., dict[str, float]]


@dataclass
class StepView:
    """An observer's view of the run between steps (never the trainer itself): what observers use."""

    step: int
    out: Path
    is_main: bool  # process 0: the one that writes files
    run_state: RunState
    record: Any  # the last step's StepRecord (episodes, scores, advantages, ...); None before the first
    checkpoint: Callable[[], Path]  # save this step's checkpoint (collective; once per step)
    # evaluate(rows, k, params, out_path) -> measures: the one evaluation with the current policy (collective)
    evaluate: Callable[..., dict[str, float]]
