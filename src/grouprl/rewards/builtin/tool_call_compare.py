"""How ``tool_call_match`` (``structured.py``) compares tool calls: each call read as (name, canonical JSON
arguments) from the OpenAI or the plain shape, and the made calls scored against the expected ones as
multisets (exact match, Jaccard over pairs and over names), with a reason naming what was missing or extra.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from grouprl.records import EvaluateResult, MetricResult

# What json.loads raises on text a policy wrote: bad syntax, an integer past int()'s digit limit
# (ValueError), nesting past the recursion limit (RecursionError).
_UNREADABLE = (ValueError, RecursionError, TypeError)


def _canonical_args(args: Any) -> str:
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except _UNREADABLE:
            return args  # not JSON: compare as the raw string
    if args is None:
        args = {}
    try:
        return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (RecursionError, TypeError, ValueError):
        return repr(type(args))  # arguments nested past the recursion limit: they match nothing expected


def normalize_calls(calls: Any, what: str) -> list[tuple[str, str]]:
    """(name, canonical-JSON arguments) of each call; accepts OpenAI and plain shapes."""
    if isinstance(calls, dict) and "tool_calls" in calls and "name" not in calls:
        calls = calls["tool_calls"]
    if isinstance(calls, dict):
        calls = [calls]
    if not isinstance(calls, list):
        raise ValueError(f"{what} must be a tool call object or a list of them, got {type(calls).__name__}")
    out = []
    for i, call in enumerate(calls):
        if not isinstance(call, dict):
            raise ValueError(f"{what}[{i}] must be an object, got {type(call).__name__}")
        function = call.get("function")
        fn = function if isinstance(function, dict) else call
        name = fn.get("name")
        if not isinstance(name, str):
            raise ValueError(f"{what}[{i}] has no string 'name'")
        out.append((name, _canonical_args(fn.get("arguments", fn.get("parameters", {})))))
    return out


def _jaccard(a: Counter, b: Counter) -> float:
    union = sum((a | b).values())
    return 1.0 if union == 0 else sum((a & b).values()) / union


def compare_calls(actual: list[tuple[str, str]], expected: list[tuple[str, str]], mode: str) -> EvaluateResult:
    """The score of the made calls against the expected ones: ``mode`` "exact" (the multisets are equal)
    or "jaccard" (over (name, arguments) pairs), with every measure as a metric."""
    a, b = Counter(actual), Counter(expected)
    pair_j = _jaccard(a, b)
    name_j = _jaccard(Counter(n for n, _ in actual), Counter(n for n, _ in expected))
    exact = float(a == b)
    score = exact if mode == "exact" else pair_j
    missing = sorted(n for n, _ in (b - a).elements())
    extra = sorted(n for n, _ in (a - b).elements())
    reason = (
        f"{mode}: {score:.3f} ({sum((a & b).values())} of {len(expected)} expected call(s) matched, {len(actual)} made)"
    )
    if missing:
        reason += f"; missing/wrong: {', '.join(missing)}"
    if extra:
        reason += f"; unexpected/wrong: {', '.join(extra)}"
    return EvaluateResult(
        score=score,
        reason=reason,
        metrics={
            "exact_match": MetricResult(score=exact),
            "pair_jaccard": MetricResult(score=pair_j),
            "name_jaccard": MetricResult(score=name_j, reason="Jaccard over tool names only"),
        },
    )
