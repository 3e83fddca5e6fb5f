"""Length-shaped built-in rewards: Kimi 1.5 length, cosine length, n-gram repetition, DAPO overlong.

Split from ``builtin/text.py`` by responsibility; they share the answer helpers in ``answers``.
"""

from __future__ import annotations

import math
from typing import Any

from grouprl.records import EvaluateResult, Message, MetricResult
from grouprl.rewards.builtin.answers import completion_text, is_correct, metric, option_or, shorten
from grouprl.rewards.kit import reward_function


# --- length (Kimi 1.5) ---------------------------------------------------------------------------


def _lengths(completions: list[str], lengths: Any) -> list[float]:
    if lengths is None:
        return [float(len(c)) for c in completions]
    return [float(len(c)) if v is None else float(v) for c, v in zip(completions, lengths)]


def _unknown_correctness(metrics: dict[str, MetricResult], truth: Any) -> EvaluateResult:
    """No opinion: neither ``correct`` nor a gold answer math-verify can parse says whether it is right."""
    return EvaluateResult(
        score=0.0,
        is_score_valid=False,
        metrics=metrics,
        reason=f"correctness unknown (gold {shorten(truth)} unparsable and no `correct`); no opinion",
    )


def _length_result(ok: bool | None, length: float, lo: float, hi: float, group: Any, truth: Any) -> EvaluateResult:
    """One sample's Kimi length reward, its group's lengths spanning [lo, hi]; no opinion when ``ok`` is None."""
    rel = 0.0 if hi == lo else (length - lo) / (hi - lo)
    lam = 0.0 if hi == lo else 0.5 - rel
    metrics = {"relative_length": metric(rel, f"len {length:g} in group range [{lo:g}, {hi:g}]")}
    if ok is None:
        return _unknown_correctness(metrics, truth)
    score = lam if ok else min(0.0, lam)
    metrics["correct"] = metric(float(ok), "correct" if ok else "wrong")
    why = (
        "all lengths in the group are equal"
        if hi == lo
        else f"lambda = 0.5 - ({length:g} - {lo:g}) / ({hi:g} - {lo:g}) = {lam:.4f}"
    )
    return EvaluateResult(
        score=score, metrics=metrics, reason=f"{'correct' if ok else 'wrong'} in group {group!r}: {why}"
    )


@reward_function(id="length", mode="batch", requirements=["math-verify"])
def length_reward(
    rollouts_messages: list[list[Message]],
    ground_truths: list[Any] | None = None,
    *,
    group_ids: list[Any] | None = None,
    correct: list[Any] | None = None,
    lengths: list[Any] | None = None,
    timeout_seconds: int = 5,
    **kwargs,
) -> list[EvaluateResult]:
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
    timeout_seconds = option_or(timeout_seconds, 5)
    completions = [completion_text(m) for m in rollouts_messages]
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
            results[i] = _length_result(ok, lens[i], lo, hi, g, truths[i])
    return results  # type: ignore[return-value]


# --- cosine_length (Yeo et al. 2025) -------------------------------------------------------------


@reward_function(id="cosine_length", requirements=["math-verify"])
def cosine_length(
    messages: list[Message],
    ground_truth: Any = None,
    *,
    correct: Any = None,
    lengths: Any = None,
    max_len: int = 1000,
    min_value_correct: float = 0.5,
    max_value_correct: float = 1.0,
    min_value_wrong: float = -1.0,
    max_value_wrong: float = -0.5,
    timeout_seconds: int = 5,
    **kwargs,
) -> EvaluateResult:
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
    max_len = option_or(max_len, 1000)
    if max_len <= 0:
        raise ValueError(f"cosine_length: max_len must be positive, got {max_len}")
    text = completion_text(messages)
    length = float(len(text)) if lengths is None else float(lengths)
    ok = is_correct(text, ground_truth, correct, option_or(timeout_seconds, 5))
    frac = min(1.0, max(0.0, length / max_len))
    metrics = {"length_fraction": metric(frac, f"L={length:g} of max_len={max_len}")}
    if ok is None:
        return _unknown_correctness(metrics, ground_truth)
    if ok:
        lo, hi = option_or(min_value_correct, 0.5), option_or(max_value_correct, 1.0)
    else:
        lo, hi = option_or(max_value_wrong, -0.5), option_or(min_value_wrong, -1.0)
    score = lo + 0.5 * (hi - lo) * (1.0 + math.cos(math.pi * frac))
    metrics["correct"] = metric(float(ok), "correct" if ok else "wrong")
    return EvaluateResult(
        score=score,
        metrics=metrics,
        reason=f"{'correct' if ok else 'wrong'}, L={length:g}/{max_len}: "
        f"{lo} + 0.5*({hi} - {lo})*(1 + cos(pi*{frac:.4f})) = {score:.4f}",
    )


# --- repetition_penalty / soft_overlong ----------------------------------------------------------


@reward_function(id="repetition_penalty")
def repetition_penalty(
    messages: list[Message], ground_truth: Any = None, *, ngram_size: int = 3, max_penalty: float = 1.0, **kwargs
) -> EvaluateResult:
    """N-gram repetition penalty (open-r1 ``get_repetition_penalty_reward``, after Yeo et al. 2025).

    Words are the lower-cased, whitespace-split completion; over its word n-grams
    (``ngram_size`` = 3)::

        reward = -|max_penalty| * (1 - unique_ngrams / total_ngrams)      in [-|max_penalty|, 0]

    An empty completion or one with fewer than ``ngram_size`` words gets 0. (open-r1 passes
    ``max_penalty`` as a negative number; either sign works here.)
    """
    ngram_size, max_penalty = option_or(ngram_size, 3), abs(option_or(max_penalty, 1.0))
    if ngram_size <= 0:
        raise ValueError(f"repetition_penalty: ngram_size must be positive, got {ngram_size}")
    words = completion_text(messages).lower().split()
    if len(words) < ngram_size:
        return EvaluateResult(
            score=0.0,
            reason=f"{len(words)} word(s) < ngram_size={ngram_size}; no penalty",
            metrics={"unique_ngram_fraction": metric(1.0, "too short to repeat")},
        )
    grams = [tuple(words[i : i + ngram_size]) for i in range(len(words) - ngram_size + 1)]
    unique = len(set(grams))
    score = -max_penalty * (1.0 - unique / len(grams))
    return EvaluateResult(
        score=score + 0.0,  # no -0.0
        reason=f"{unique} unique of {len(grams)} {ngram_size}-grams: -{max_penalty} * (1 - {unique}/{len(grams)})"
        f" = {score:.4f}",
        metrics={"unique_ngram_fraction": metric(unique / len(grams), f"{unique}/{len(grams)}")},
    )


@reward_function(id="soft_overlong")
def soft_overlong(
    messages: list[Message],
    ground_truth: Any = None,
    *,
    max_completion_len: int = 20480,
    cache_len: int = 4096,
    completion_length: Any = None,
    **kwargs,
) -> EvaluateResult:
    """DAPO's soft overlong punishment (Yu et al. 2025, "DAPO", eq. 13).

    With L the completion length (``completion_length`` if given, e.g. tokens, else characters),
    L_max = ``max_completion_len`` and L_cache = ``cache_len`` (defaults are DAPO's 20480 / 4096,
    which are token counts: set them to your budget and unit)::

        R = 0                                   if L <= L_max - L_cache
            (L_max - L_cache - L) / L_cache     if L_max - L_cache < L <= L_max
            -1                                  if L > L_max
    """
    l_max, l_cache = option_or(max_completion_len, 20480), option_or(cache_len, 4096)
    if not 0 < l_cache <= l_max:
        raise ValueError(f"soft_overlong: need 0 < cache_len <= max_completion_len, got {l_cache}, {l_max}")
    text = completion_text(messages)
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
    return EvaluateResult(
        score=score,
        reason=f"{why} ({unit})",
        metrics={
            "within_budget": metric(float(length <= l_max), f"L_max={l_max}"),
            "length_fraction": metric(length / l_max, f"L/L_max, {unit}"),
        },
    )
