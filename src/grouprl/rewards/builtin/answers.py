"""Answer helpers shared by the built-in rewards: the completion text, option defaults,
correctness by math-verify (run in its own process, ``math_judge.py``), and short reasons."""

from __future__ import annotations

from typing import Any

from grouprl.records import Message, MetricResult
from grouprl.rewards.builtin import math_judge

# --- helpers -------------------------------------------------------------------------------------


def completion_text(messages: list[Message]) -> str:
    return messages[-1].content if messages else ""


def option_or(value: Any, default: Any) -> Any:
    """An option's value; ``None`` (e.g. a missing dataset column) means the default."""
    return default if value is None else value


def is_correct(completion: str, ground_truth: Any, correct: Any = None, timeout_seconds: int = 5) -> bool | None:
    """Correctness used by the length rewards: ``correct`` if given, else math-verify against the
    gold (in its own process, see ``math_judge``); ``None`` when neither is known (no gold, or a gold
    that cannot be parsed). An answer math-verify cannot finish with is not correct."""
    if correct is not None:
        return bool(correct)
    verdict = math_judge.judge(completion, ground_truth, timeout_seconds)
    if verdict.gold is None and verdict.note is None:
        return None
    return verdict.correct


def metric(score: float, reason: str) -> MetricResult:
    return MetricResult(score=min(1.0, max(0.0, float(score))), reason=reason)


def shorten(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- math_accuracy -------------------------------------------------------------------------------
