"""Answer helpers shared by the built-in rewards: the completion text, option defaults,
math-verify parsing and equivalence, and short reasons."""

from __future__ import annotations

import re
import threading
from typing import Any

from grouprl.records import Message, MetricResult

# --- helpers -------------------------------------------------------------------------------------

def completion_text(messages: list[Message]) -> str:
    return messages[-1].content if messages else ""


def option_or(value: Any, default: Any) -> Any:
    """An option's value; ``None`` (e.g. a missing dataset column) means the default."""
    return default if value is None else value


def _timeout(seconds: int) -> int | None:
    # math-verify times out with signal.alarm, which only works in the main thread.
    return seconds if threading.current_thread() is threading.main_thread() else None


def _answer_config():
    from math_verify import ExprExtractionConfig, LatexExtractionConfig
    from math_verify.parser import NormalizationConfig

    # open-r1's accuracy_reward config (boxed answers first, LaTeX needs $..$/\[..\]/\boxed
    # anchors), plus plain expressions so "the answer is 0.5" also parses.
    return [
        LatexExtractionConfig(
            normalization_config=NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True,
                                                     boxed="all", units=True),
            boxed_match_priority=0, try_extract_without_anchor=False),
        ExprExtractionConfig(),
    ]


def parse_gold(ground_truth: Any, timeout_seconds: int = 5) -> list:
    """math-verify's parse of a gold answer; ``[]`` if it cannot be parsed.

    A GSM8K-style ``... #### 72`` keeps what follows ``####``; a bare LaTeX gold such as
    ``\\sqrt{2}`` or ``x^2`` (it has a backslash, ``^``, ``_`` or braces) that fails as is is
    retried as ``$\\sqrt{2}$``; plain words such as ``banana`` stay unparsable.
    """
    from math_verify import parse

    if ground_truth is None:
        return []
    gold = str(ground_truth).strip()
    if "####" in gold:
        gold = gold.rsplit("####", 1)[1].strip()
    if not gold:
        return []
    timeout = _timeout(timeout_seconds)
    parsed = parse(gold, extraction_mode="first_match", parsing_timeout=timeout)
    if not parsed and "$" not in gold and re.search(r"[\\^_{}]", gold):
        parsed = parse(f"${gold}$", extraction_mode="first_match", parsing_timeout=timeout)
    return parsed


def parse_answer(completion: str, timeout_seconds: int = 5) -> list:
    """math-verify's parse of a completion's final answer (``\\boxed{}`` first); ``[]`` if none."""
    from math_verify import parse

    if not completion.strip():
        return []
    return parse(completion, extraction_config=_answer_config(), extraction_mode="first_match",
                 parsing_timeout=_timeout(timeout_seconds))


def verify_answer(gold: list, answer: list, timeout_seconds: int = 5) -> bool:
    from math_verify import verify

    if not gold or not answer:
        return False
    return bool(verify(gold, answer, timeout_seconds=_timeout(timeout_seconds)))


def is_correct(completion: str, ground_truth: Any, correct: Any = None, timeout_seconds: int = 5) -> bool | None:
    """Correctness used by the length rewards: ``correct`` if given, else math-verify against the
    gold; ``None`` when neither is known (no gold, or a gold that cannot be parsed)."""
    if correct is not None:
        return bool(correct)
    gold = parse_gold(ground_truth, timeout_seconds)
    if not gold:
        return None
    return verify_answer(gold, parse_answer(completion, timeout_seconds), timeout_seconds)


def metric(score: float, reason: str) -> MetricResult:
    return MetricResult(score=min(1.0, max(0.0, float(score))), reason=reason)


def shorten(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- math_accuracy -------------------------------------------------------------------------------
