"""Built-in text rewards: answer accuracy, format, length and repetition shaping.

Every function here is a typed ``@reward_function``. The pointwise ones have the signature
``fn(messages, ground_truth=None, **kwargs) -> EvaluateResult`` and score the completion
``messages[-1].content``; ``length`` is a batch (group-level) reward. Options are keyword
arguments with defaults; any other keyword argument (dataset columns) is ignored. An option
passed as ``None`` (a missing dataset column) means its default.

Options cannot travel through ``score_batch`` or the TRL adapter as scalars (those pass
per-sample lists), so bind them with :func:`with_options`, which returns a new typed reward::

    short_cosine = with_options(cosine_length, max_len=500)
    trainer_reward = short_cosine.as_trl()

``BUILTIN_TEXT`` maps registry names to the functions.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from grouprl.records import EvaluateResult, Message
from grouprl.rewards.builtin import math_judge
from grouprl.rewards.builtin.answers import completion_text, is_correct, metric, option_or, shorten
from grouprl.rewards.builtin.length import cosine_length, length_reward, repetition_penalty, soft_overlong
from grouprl.rewards.kit import with_options, reward_function

__all__ = [
    "BUILTIN_TEXT",
    "cosine_length",
    "format_reward",
    "is_correct",
    "length_reward",
    "math_accuracy",
    "reasoning_steps",
    "repetition_penalty",
    "soft_overlong",
    "tag_count",
    "with_options",
]


@reward_function(id="math_accuracy", requirements=["math-verify"])
def math_accuracy(
    messages: list[Message], ground_truth: Any = None, *, timeout_seconds: int = 5, **kwargs
) -> EvaluateResult:
    """Answer equivalence with Hugging Face ``math-verify`` (open-r1's ``accuracy_reward``).

    The gold (``ground_truth``) and the completion are parsed into sympy expressions
    (``\\boxed{}`` answers first, then LaTeX in ``$..$``, then plain numbers/expressions;
    fractions, decimals, percentages and sets are handled by math-verify) and compared:
    ``\\boxed{\\frac{1}{2}}`` matches gold ``0.5``.

    score = 1.0 if ``verify(gold, answer)`` else 0.0. A missing or unparsable gold gives
    ``is_score_valid=False`` (no opinion), never a 0. Metrics: ``correct``, ``answer_found``.
    """
    timeout_seconds = option_or(timeout_seconds, 5)
    verdict = math_judge.judge(completion_text(messages), ground_truth, timeout_seconds)
    if verdict.note is not None:  # math-verify could not finish with this answer: it is not a correct one
        return EvaluateResult(score=0.0, reason=verdict.note, metrics={"correct": metric(0.0, verdict.note)})
    if verdict.gold is None:
        return EvaluateResult(
            score=0.0,
            is_score_valid=False,
            reason=f"gold answer {shorten(ground_truth)} could not be parsed; no opinion",
        )
    if verdict.answer is None:
        return EvaluateResult(
            score=0.0,
            reason=f"no answer found in the completion (gold {verdict.gold})",
            metrics={"correct": metric(0.0, "no answer"), "answer_found": metric(0.0, "nothing parsable")},
        )
    ok = verdict.correct
    return EvaluateResult(
        score=1.0 if ok else 0.0,
        reason=f"answer {verdict.answer} {'matches' if ok else 'does not match'} gold {verdict.gold}",
        metrics={
            "correct": metric(float(ok), "math-verify equivalence"),
            "answer_found": metric(1.0, f"parsed {verdict.answer}"),
        },
    )


# --- format / tag_count / reasoning_steps --------------------------------------------------------

DEFAULT_FORMAT = r"^<think>.*?</think>\s*<answer>.*?</answer>$"


@reward_function(id="format")
def format_reward(
    messages: list[Message],
    ground_truth: Any = None,
    *,
    pattern: str = DEFAULT_FORMAT,
    flags: int = re.DOTALL,
    **kwargs,
) -> EvaluateResult:
    """Format reward (DeepSeek-R1 / open-r1 ``format_reward``): 1.0 if the completion, with
    surrounding whitespace stripped, matches ``pattern`` in full (``re.fullmatch``), else 0.0.

    Default pattern ``^<think>.*?</think>\\s*<answer>.*?</answer>$`` with ``re.DOTALL``.
    """
    pattern, flags = option_or(pattern, DEFAULT_FORMAT), option_or(flags, re.DOTALL)
    ok = re.fullmatch(pattern, completion_text(messages).strip(), flags) is not None
    return EvaluateResult(
        score=float(ok),
        reason=f"completion {'matches' if ok else 'does not match'} {pattern!r}",
        metrics={"full_match": metric(float(ok), "re.fullmatch")},
    )


TAGS = ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>")


@reward_function(id="tag_count")
def tag_count(messages: list[Message], ground_truth: Any = None, **kwargs) -> EvaluateResult:
    """open-r1's ``tag_count_reward``: 0.25 for each of ``<think>\\n``, ``\\n</think>\\n``,
    ``\\n<answer>\\n`` and ``\\n</answer>`` that occurs exactly once (score in {0, .25, .5, .75, 1}).
    """
    text = completion_text(messages)
    counts = {tag: text.count(tag) for tag in TAGS}
    score = 0.25 * sum(c == 1 for c in counts.values())
    names = ("think_open", "think_close", "answer_open", "answer_close")
    return EvaluateResult(
        score=score,
        reason="tag counts " + ", ".join(f"{t!r}={c}" for t, c in counts.items()),
        metrics={n: metric(float(c == 1), f"{t!r} occurs {c} time(s)") for n, (t, c) in zip(names, counts.items())},
    )


STEP_PATTERNS = {
    "step_labels": re.compile(r"\bStep \d+:"),
    "numbered_lines": re.compile(r"^\s*\d+\.\s", re.MULTILINE),
    "bullets": re.compile(r"^\s*[-*]\s", re.MULTILINE),
    "transition_words": re.compile(r"\b(?:First|Second|Next|Finally)\b"),
}


@reward_function(id="reasoning_steps")
def reasoning_steps(messages: list[Message], ground_truth: Any = None, *, n: int = 3, **kwargs) -> EvaluateResult:
    """Step-by-step reasoning reward (open-r1's ``reasoning_steps_reward``).

    Counts step markers: ``Step <k>:``, numbered lines ``^<k>. ``, bullet lines ``^- `` / ``^* ``
    and the capitalised words First, Second, Next, Finally (a line such as ``1. First, ...``
    counts twice, as in open-r1). score = min(1, count / n), n = 3 by default.
    Metrics: per marker kind, min(1, count_kind / n).
    """
    n = option_or(n, 3)
    if n <= 0:
        raise ValueError(f"reasoning_steps: n must be positive, got {n}")
    text = completion_text(messages)
    counts = {name: len(p.findall(text)) for name, p in STEP_PATTERNS.items()}
    total = sum(counts.values())
    return EvaluateResult(
        score=min(1.0, total / n),
        reason=f"{total} step marker(s) (" + ", ".join(f"{k}={v}" for k, v in counts.items()) + f"), n={n}",
        metrics={k: metric(v / n, f"{v} found") for k, v in counts.items()},
    )


# --- options and the registry map ----------------------------------------------------------------

BUILTIN_TEXT: dict[str, Callable] = {
    "math_accuracy": math_accuracy,
    "format": format_reward,
    "tag_count": tag_count,
    "reasoning_steps": reasoning_steps,
    "length": length_reward,
    "cosine_length": cosine_length,
    "repetition_penalty": repetition_penalty,
    "soft_overlong": soft_overlong,
}
