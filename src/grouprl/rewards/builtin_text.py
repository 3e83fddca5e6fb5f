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

import math
import re
import threading
from typing import Any, Callable

from grouprl.records import EvaluateResult, Message, MetricResult
from grouprl.rewards.kit import with_options, reward_function

__all__ = [
    "BUILTIN_TEXT", "cosine_length", "format_reward", "is_correct", "length_reward", "math_accuracy",
    "reasoning_steps", "repetition_penalty", "soft_overlong", "tag_count", "with_options",
]


# --- helpers -------------------------------------------------------------------------------------

def _completion(messages: list[Message]) -> str:
    return messages[-1].content if messages else ""


def _opt(value: Any, default: Any) -> Any:
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


def _verify(gold: list, answer: list, timeout_seconds: int = 5) -> bool:
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
    return _verify(gold, parse_answer(completion, timeout_seconds), timeout_seconds)


def _metric(score: float, reason: str) -> MetricResult:
    return MetricResult(score=min(1.0, max(0.0, float(score))), reason=reason)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- math_accuracy -------------------------------------------------------------------------------

@reward_function(id="math_accuracy", requirements=["math-verify"])
def math_accuracy(messages: list[Message], ground_truth: Any = None, *, timeout_seconds: int = 5,
                  **kwargs) -> EvaluateResult:
    """Answer equivalence with Hugging Face ``math-verify`` (open-r1's ``accuracy_reward``).

    The gold (``ground_truth``) and the completion are parsed into sympy expressions
    (``\\boxed{}`` answers first, then LaTeX in ``$..$``, then plain numbers/expressions;
    fractions, decimals, percentages and sets are handled by math-verify) and compared:
    ``\\boxed{\\frac{1}{2}}`` matches gold ``0.5``.

    score = 1.0 if ``verify(gold, answer)`` else 0.0. A missing or unparsable gold gives
    ``is_score_valid=False`` (no opinion), never a 0. Metrics: ``correct``, ``answer_found``.
    """
    timeout_seconds = _opt(timeout_seconds, 5)
    gold = parse_gold(ground_truth, timeout_seconds)
    if not gold:
        return EvaluateResult(score=0.0, is_score_valid=False,
                              reason=f"gold answer {_short(ground_truth)} could not be parsed; no opinion")
    answer = parse_answer(_completion(messages), timeout_seconds)
    if not answer:
        return EvaluateResult(score=0.0, reason=f"no answer found in the completion (gold {gold[-1]!s})",
                              metrics={"correct": _metric(0.0, "no answer"),
                                       "answer_found": _metric(0.0, "nothing parsable")})
    ok = _verify(gold, answer, timeout_seconds)
    return EvaluateResult(
        score=1.0 if ok else 0.0,
        reason=f"answer {answer[-1]!s} {'matches' if ok else 'does not match'} gold {gold[-1]!s}",
        metrics={"correct": _metric(float(ok), "math-verify equivalence"),
                 "answer_found": _metric(1.0, f"parsed {answer[-1]!s}")})


# --- format / tag_count / reasoning_steps --------------------------------------------------------

DEFAULT_FORMAT = r"^<think>.*?</think>\s*<answer>.*?</answer>$"


@reward_function(id="format")
def format_reward(messages: list[Message], ground_truth: Any = None, *, pattern: str = DEFAULT_FORMAT,
                  flags: int = re.DOTALL, **kwargs) -> EvaluateResult:
    """Format reward (DeepSeek-R1 / open-r1 ``format_reward``): 1.0 if the completion, with
    surrounding whitespace stripped, matches ``pattern`` in full (``re.fullmatch``), else 0.0.

    Default pattern ``^<think>.*?</think>\\s*<answer>.*?</answer>$`` with ``re.DOTALL``.
    """
    pattern, flags = _opt(pattern, DEFAULT_FORMAT), _opt(flags, re.DOTALL)
    ok = re.fullmatch(pattern, _completion(messages).strip(), flags) is not None
    return EvaluateResult(score=float(ok),
                          reason=f"completion {'matches' if ok else 'does not match'} {pattern!r}",
                          metrics={"full_match": _metric(float(ok), "re.fullmatch")})


TAGS = ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>")


@reward_function(id="tag_count")
def tag_count(messages: list[Message], ground_truth: Any = None, **kwargs) -> EvaluateResult:
    """open-r1's ``tag_count_reward``: 0.25 for each of ``<think>\\n``, ``\\n</think>\\n``,
    ``\\n<answer>\\n`` and ``\\n</answer>`` that occurs exactly once (score in {0, .25, .5, .75, 1}).
    """
    text = _completion(messages)
    counts = {tag: text.count(tag) for tag in TAGS}
    score = 0.25 * sum(c == 1 for c in counts.values())
    names = ("think_open", "think_close", "answer_open", "answer_close")
    return EvaluateResult(
        score=score,
        reason="tag counts " + ", ".join(f"{t!r}={c}" for t, c in counts.items()),
        metrics={n: _metric(float(c == 1), f"{t!r} occurs {c} time(s)") for n, (t, c) in zip(names, counts.items())})


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
    n = _opt(n, 3)
    if n <= 0:
        raise ValueError(f"reasoning_steps: n must be positive, got {n}")
    text = _completion(messages)
    counts = {name: len(p.findall(text)) for name, p in STEP_PATTERNS.items()}
    total = sum(counts.values())
    return EvaluateResult(
        score=min(1.0, total / n),
        reason=f"{total} step marker(s) (" + ", ".join(f"{k}={v}" for k, v in counts.items()) + f"), n={n}",
        metrics={k: _metric(v / n, f"{v} found") for k, v in counts.items()})


# --- length (Kimi 1.5) ---------------------------------------------------------------------------

def _lengths(completions: list[str], lengths: Any) -> list[float]:
    if lengths is None:
        return [float(len(c)) for c in completions]
    return [float(len(c)) if v is None else float(v) for c, v in zip(completions, lengths)]


@reward_function(id="length", mode="batch", requirements=["math-verify"])
def length_reward(rollouts_messages: list[list[Message]], ground_truths: list[Any] | None = None, *,
                  group_ids: list[Any] | None = None, correct: list[Any] | None = None,
                  lengths: list[Any] | None = None, timeout_seconds: int = 5, **kwargs) -> list[EvaluateResult]:
    """Kimi k1.5's length penalty (Kimi Team 2025, "Kimi k1.5", section 2.3.3; open-r1 ``len_reward``).

    Group-level: within each group (``group_ids``, one id per sample; default: the whole batch is
    one group), with len_i the completion's length (characters, or ``lengths`` e.g. token counts)::

        lambda_i = 0.5 - (len_i - min_len) / (max_len - min_len)
        reward_i = lambda_i            if correct
                   min(0, lambda_i)    if wrong

    so scores lie in [-0.5, 0.5]. If every length in the group is equal, every reward is 0.
    Correctness comes from ``correct`` (list of bools; a ``None`` entry falls back) or else from
    math-verify against ``ground_truths``; a sample whose correctness is unknown still counts in
    the group's min/max length but gets ``is_score_valid=False`` (no opinion).
    """
    size = len(rollouts_messages)
    timeout_seconds = _opt(timeout_seconds, 5)
    completions = [_completion(m) for m in rollouts_messages]
    truths = list(ground_truths) if ground_truths is not None else [None] * size
    flags = list(correct) if correct is not None else [None] * size
    gids = list(group_ids) if group_ids is not None else [0] * size
    for name, seq in (("ground_truths", truths), ("correct", flags), ("group_ids", gids)):
        if len(seq) != size:
            raise ValueError(f"length: {name} has {len(seq)} entries for {size} completions")
    lens = _lengths(completions, lengths)
    if len(lens) != size:
        raise ValueError(f"length: lengths has {len(lens)} entries for {size} completions")

    groups: dict[Any, list[int]] = {}
    for i, g in enumerate(gids):
        groups.setdefault(g, []).append(i)
    results: list[EvaluateResult | None] = [None] * size
    for g, members in groups.items():
        lo, hi = min(lens[i] for i in members), max(lens[i] for i in members)
        for i in members:
            ok = is_correct(completions[i], truths[i], flags[i], timeout_seconds)
            rel = 0.0 if hi == lo else (lens[i] - lo) / (hi - lo)
            lam = 0.0 if hi == lo else 0.5 - rel
            metrics = {"relative_length": _metric(rel, f"len {lens[i]:g} in group range [{lo:g}, {hi:g}]")}
            if ok is None:
                results[i] = EvaluateResult(score=0.0, is_score_valid=False, metrics=metrics,
                                            reason=f"correctness unknown (gold {_short(truths[i])} unparsable "
                                                   "and no `correct`); no opinion")
                continue
            score = lam if ok else min(0.0, lam)
            metrics["correct"] = _metric(float(ok), "correct" if ok else "wrong")
            why = ("all lengths in the group are equal" if hi == lo
                   else f"lambda = 0.5 - ({lens[i]:g} - {lo:g}) / ({hi:g} - {lo:g}) = {lam:.4f}")
            results[i] = EvaluateResult(score=score, metrics=metrics,
                                        reason=f"{'correct' if ok else 'wrong'} in group {g!r}: {why}")
    return results  # type: ignore[return-value]


# --- cosine_length (Yeo et al. 2025) -------------------------------------------------------------

@reward_function(id="cosine_length", requirements=["math-verify"])
def cosine_length(messages: list[Message], ground_truth: Any = None, *, correct: Any = None,
                  lengths: Any = None, max_len: int = 1000, min_value_correct: float = 0.5,
                  max_value_correct: float = 1.0, min_value_wrong: float = -1.0, max_value_wrong: float = -0.5,
                  timeout_seconds: int = 5, **kwargs) -> EvaluateResult:
    """Correctness-aware cosine length reward (Yeo et al. 2025, "Demystifying Long
    Chain-of-Thought Reasoning in LLMs"; open-r1 ``get_cosine_scaled_reward``).

    With L the completion length (characters, or ``lengths`` e.g. a token count), clipped to
    ``max_len``::

        r = lo + 0.5 * (hi - lo) * (1 + cos(pi * L / max_len))
        (lo, hi) = (min_value_correct, max_value_correct) = (0.5, 1.0)    if correct
                   (max_value_wrong,   min_value_wrong)   = (-0.5, -1.0)  if wrong

    Correct: 1.0 at L=0 falling to 0.5 at max_len (shorter is better). Wrong: -1.0 at L=0 rising
    to -0.5 at max_len (a short wrong answer is punished most, so the model keeps thinking).
    Correctness: ``correct`` if given, else math-verify against ``ground_truth``; unknown
    (no/unparsable gold) -> ``is_score_valid=False``. L > max_len is clipped (the paper's
    separate exceed-length penalty is not applied; combine with ``soft_overlong`` for that).
    """
    max_len = _opt(max_len, 1000)
    if max_len <= 0:
        raise ValueError(f"cosine_length: max_len must be positive, got {max_len}")
    text = _completion(messages)
    length = float(len(text)) if lengths is None else float(lengths)
    ok = is_correct(text, ground_truth, correct, _opt(timeout_seconds, 5))
    frac = min(1.0, max(0.0, length / max_len))
    metrics = {"length_fraction": _metric(frac, f"L={length:g} of max_len={max_len}")}
    if ok is None:
        return EvaluateResult(score=0.0, is_score_valid=False, metrics=metrics,
                              reason=f"correctness unknown (gold {_short(ground_truth)} unparsable and no "
                                     "`correct`); no opinion")
    if ok:
        lo, hi = _opt(min_value_correct, 0.5), _opt(max_value_correct, 1.0)
    else:
        lo, hi = _opt(max_value_wrong, -0.5), _opt(min_value_wrong, -1.0)
    score = lo + 0.5 * (hi - lo) * (1.0 + math.cos(math.pi * frac))
    metrics["correct"] = _metric(float(ok), "correct" if ok else "wrong")
    return EvaluateResult(score=score, metrics=metrics,
                          reason=f"{'correct' if ok else 'wrong'}, L={length:g}/{max_len}: "
                                 f"{lo} + 0.5*({hi} - {lo})*(1 + cos(pi*{frac:.4f})) = {score:.4f}")


# --- repetition_penalty / soft_overlong ----------------------------------------------------------

@reward_function(id="repetition_penalty")
def repetition_penalty(messages: list[Message], ground_truth: Any = None, *, ngram_size: int = 3,
                       max_penalty: float = 1.0, **kwargs) -> EvaluateResult:
    """N-gram repetition penalty (open-r1 ``get_repetition_penalty_reward``, after Yeo et al. 2025).

    Words are the lower-cased, whitespace-split completion; over its word n-grams
    (``ngram_size`` = 3)::

        reward = -|max_penalty| * (1 - unique_ngrams / total_ngrams)      in [-|max_penalty|, 0]

    An empty completion or one with fewer than ``ngram_size`` words gets 0. (open-r1 passes
    ``max_penalty`` as a negative number; either sign works here.)
    """
    ngram_size, max_penalty = _opt(ngram_size, 3), abs(_opt(max_penalty, 1.0))
    if ngram_size <= 0:
        raise ValueError(f"repetition_penalty: ngram_size must be positive, got {ngram_size}")
    words = _completion(messages).lower().split()
    if len(words) < ngram_size:
        return EvaluateResult(score=0.0, reason=f"{len(words)} word(s) < ngram_size={ngram_size}; no penalty",
                              metrics={"unique_ngram_fraction": _metric(1.0, "too short to repeat")})
    grams = [tuple(words[i:i + ngram_size]) for i in range(len(words) - ngram_size + 1)]
    unique = len(set(grams))
    score = -max_penalty * (1.0 - unique / len(grams))
    return EvaluateResult(
        score=score + 0.0,  # no -0.0
        reason=f"{unique} unique of {len(grams)} {ngram_size}-grams: -{max_penalty} * (1 - {unique}/{len(grams)})"
               f" = {score:.4f}",
        metrics={"unique_ngram_fraction": _metric(unique / len(grams), f"{unique}/{len(grams)}")})


@reward_function(id="soft_overlong")
def soft_overlong(messages: list[Message], ground_truth: Any = None, *, max_completion_len: int = 20480,
                  cache_len: int = 4096, completion_length: Any = None, **kwargs) -> EvaluateResult:
    """DAPO's soft overlong punishment (Yu et al. 2025, "DAPO", eq. 13).

    With L the completion length (``completion_length`` if given, e.g. tokens, else characters),
    L_max = ``max_completion_len`` and L_cache = ``cache_len`` (defaults are DAPO's 20480 / 4096,
    which are token counts: set them to your budget and unit)::

        R = 0                                   if L <= L_max - L_cache
            (L_max - L_cache - L) / L_cache     if L_max - L_cache < L <= L_max
            -1                                  if L > L_max
    """
    l_max, l_cache = _opt(max_completion_len, 20480), _opt(cache_len, 4096)
    if not 0 < l_cache <= l_max:
        raise ValueError(f"soft_overlong: need 0 < cache_len <= max_completion_len, got {l_cache}, {l_max}")
    text = _completion(messages)
    length = float(len(text)) if completion_length is None else float(completion_length)
    unit = "characters" if completion_length is None else "given units"
    free = l_max - l_cache
    if length <= free:
        score, why = 0.0, f"L={length:g} <= {free} (L_max - L_cache)"
    elif length <= l_max:
        score = (free - length) / l_cache
        why = f"L={length:g} in the cache window: ({free} - {length:g}) / {l_cache} = {score:.4f}"
    else:
        score, why = -1.0, f"L={length:g} > L_max={l_max}"
    return EvaluateResult(score=score, reason=f"{why} ({unit})",
                          metrics={"within_budget": _metric(float(length <= l_max), f"L_max={l_max}"),
                                   "length_fraction": _metric(length / l_max, f"L/L_max, {unit}")})


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
