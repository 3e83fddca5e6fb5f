"""Built-in typed rewards for structured outputs: JSON schema, tool calls, executed code.

All three are pointwise ``@reward_function``s: they score ``messages[-1]`` (the completion),
take their options as keyword arguments with defaults, ignore unknown keyword arguments (the
other fields of a sample are passed to every reward) and always set ``reason``.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from collections import Counter
from typing import Any

from grouprl.records import EvaluateResult, Message, MetricResult
from grouprl.rewards.kit import reward_function
from grouprl.rewards.sandbox import code_harness
from grouprl.rewards.sandbox.runner import run_in_sandbox, run_many
from grouprl.safe_text import JsonRejected, safe_json_loads

__all__ = [
    "json_schema",
    "tool_call_match",
    "code_execution",
    "BUILTIN_STRUCTURED",
    "extract_json",
    "extract_python_block",
]

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)  # what _fenced_blocks finds
_LANG = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")
_PY_LANGS = {"python", "py", "python3"}


# --------------------------------------------------------------------------- helpers


def _completion(messages: list[Message]) -> str:
    return messages[-1].content if messages else ""


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block, in order. A linear scan with ``str.find``: the
    regex it replaces (``_FENCE``) took quadratic time on a run of backticks (100k: 38 s)."""
    text = text or ""
    blocks: list[tuple[str, str]] = []
    pos = 0
    while True:
        start = text.find("```", pos)
        eol = text.find("\n", start) if start >= 0 else -1
        end = text.find("```", eol + 1) if eol >= 0 else -1
        if end < 0:
            return blocks
        lang = _LANG.match(text, start + 3, eol)  # it always matches (perhaps nothing)
        blocks.append(((lang.group(1) if lang else "").lower(), text[eol + 1 : end]))
        pos = end + 3


# What json.loads raises on text a policy wrote: bad syntax, an integer past int()'s digit limit
# (ValueError), nesting past the recursion limit (RecursionError).
_UNREADABLE = (ValueError, RecursionError, TypeError)


def _policy_json(text: str) -> Any:
    """JSON the policy wrote, through the one safe decoder (safe_text): ``ValueError`` with its reason."""
    value = safe_json_loads(text)
    if isinstance(value, JsonRejected):
        raise ValueError(value.reason)
    return value


def extract_json(text: str) -> Any:
    """The JSON value of ``text``: the whole text, else the last ```json block, else the last
    unlabelled fenced block. Raises ``ValueError`` naming what was tried."""
    text = text or ""
    try:
        return _policy_json(text)
    except ValueError:
        pass
    blocks = _fenced_blocks(text)
    candidates = [b for lang, b in blocks if lang == "json"] or [b for lang, b in blocks if lang == ""]
    if not candidates:
        raise ValueError("completion is not JSON and has no ```json fenced block")
    try:
        return _policy_json(candidates[-1])
    except ValueError as err:
        raise ValueError(f"fenced JSON block does not parse: {str(err)[:120]}") from None


def extract_python_block(text: str) -> str | None:
    """The body of the last ```python (or ```py / ```python3) fenced block, else None."""
    blocks = [b for lang, b in _fenced_blocks(text) if lang in _PY_LANGS]
    return blocks[-1] if blocks else None


def _maybe_json(value: Any) -> Any:
    if isinstance(value, (str, bytes)):
        return json.loads(value)
    return value


def _short(text: str, n: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


# --------------------------------------------------------------------------- json_schema


@reward_function
def json_schema(messages: list[Message], ground_truth: Any = None, schema: Any = None, **kwargs) -> EvaluateResult:
    """1.0 if the completion's JSON (whole text or a ```json block) validates against the schema, else 0.0.

    The schema is the ``schema`` keyword (a dict or a JSON string), else ``ground_truth``.
    Unparsable JSON scores 0.0; the parse or validation error is in ``reason``. A missing or
    invalid schema gives ``is_score_valid=False`` (no opinion) with the problem in ``error``.
    """
    import jsonschema

    raw_schema = schema if schema is not None else ground_truth
    if raw_schema is None:
        return EvaluateResult(
            score=0.0,
            is_score_valid=False,
            reason="no schema (pass schema= or ground_truth)",
            error="json_schema: no schema given",
        )
    try:
        sch = _maybe_json(raw_schema)
        if not isinstance(sch, (dict, bool)):
            raise ValueError(f"schema must be a JSON object, got {type(sch).__name__}")
        validator_cls = jsonschema.validators.validator_for(sch)
        validator_cls.check_schema(sch)
    except (ValueError, jsonschema.SchemaError) as err:
        msg = getattr(err, "message", None) or str(err)
        return EvaluateResult(
            score=0.0,
            is_score_valid=False,
            reason=f"invalid schema: {_short(msg)}",
            error=f"json_schema: invalid schema: {_short(msg)}",
        )
    try:
        value = extract_json(_completion(messages))
    except ValueError as err:
        return EvaluateResult(
            score=0.0, reason=f"unparsable JSON: {err}", metrics={"parsed": MetricResult(score=0.0, reason=str(err))}
        )
    try:
        errors = sorted(validator_cls(sch).iter_errors(value), key=lambda e: list(e.path))
    except RecursionError:
        return EvaluateResult(
            score=0.0,
            reason="JSON nested too deeply to validate",
            metrics={"parsed": MetricResult(score=1.0), "valid": MetricResult(score=0.0)},
        )
    if not errors:
        return EvaluateResult(
            score=1.0,
            reason="JSON is valid against the schema",
            metrics={"parsed": MetricResult(score=1.0), "valid": MetricResult(score=1.0)},
        )
    best = jsonschema.exceptions.best_match(errors)
    where = "/".join(str(p) for p in best.absolute_path) or "<root>"
    reason = f"schema validation failed at {where}: {_short(best.message)}"
    if len(errors) > 1:
        reason += f" (+{len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return EvaluateResult(
        score=0.0,
        reason=reason,
        metrics={"parsed": MetricResult(score=1.0), "valid": MetricResult(score=0.0, reason=reason)},
    )


# --------------------------------------------------------------------------- tool_call_match


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


def _normalize_calls(calls: Any, what: str) -> list[tuple[str, str]]:
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


@reward_function
def tool_call_match(messages: list[Message], ground_truth: Any = None, mode: str = "exact", **kwargs) -> EvaluateResult:
    """Compare the completion's tool calls with the expected ones in ``ground_truth``.

    Calls come from ``messages[-1].tool_calls`` if present, else from JSON in the completion (a
    list of ``{"name", "arguments"}`` or a single one; OpenAI ``{"function": {...}}`` works too).
    Arguments compare as canonical JSON (key order and spacing do not matter).
    ``mode="exact"``: 1.0 iff the multisets of (name, arguments) are equal, else 0.0.
    ``mode="jaccard"``: |A∩B| / |A∪B| over (name, arguments) pairs (multisets); the
    ``name_jaccard`` metric is the same over names only. Unparsable calls score 0.0.
    """
    if mode not in ("exact", "jaccard"):
        return EvaluateResult(
            score=0.0,
            is_score_valid=False,
            reason=f"unknown mode {mode!r}",
            error=f"tool_call_match: mode must be 'exact' or 'jaccard', got {mode!r}",
        )
    if ground_truth is None:
        return EvaluateResult(
            score=0.0,
            is_score_valid=False,
            reason="no expected tool calls (ground_truth)",
            error="tool_call_match: no ground_truth",
        )
    try:
        expected = _normalize_calls(_maybe_json(ground_truth), "ground_truth")
    except (ValueError, json.JSONDecodeError) as err:
        return EvaluateResult(
            score=0.0,
            is_score_valid=False,
            reason=f"bad ground_truth: {err}",
            error=f"tool_call_match: bad ground_truth: {err}",
        )
    last = messages[-1] if messages else None
    try:
        if last is not None and last.tool_calls:
            actual = _normalize_calls(last.tool_calls, "tool_calls")
        else:
            actual = _normalize_calls(extract_json(_completion(messages)), "completion")
    except ValueError as err:
        return EvaluateResult(score=0.0, reason=f"no parsable tool calls: {err}")

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


# --------------------------------------------------------------------------- code_execution


def _norm_out(text: str) -> str:
    return "\n".join(line.rstrip() for line in str(text).strip().splitlines())


def _kill_text(res, timeout: float) -> str:
    reason = res.killed_reason
    if reason == "timeout":
        return f"killed: timeout after {timeout:g}s"
    if reason == "cpu":
        return "killed: cpu (CPU time limit; timeout)"
    if reason == "memory":
        return "killed: memory (memory limit exceeded)"
    if reason == "output":
        return "killed: output (output too large)"
    return f"killed: {reason}"


def _last_line(text: str) -> str:
    lines = [ln for ln in str(text).strip().splitlines() if ln.strip()]
    return _short(lines[-1], 160) if lines else ""


def _assert_verdicts(splits: dict, results: list, limits: dict) -> dict:
    """(passed, reason) per assert case, decided by the judge sandbox (see ``code_harness``);
    or ``{"judge": result}`` when the judge could not start (an infrastructure error)."""
    order = sorted(splits)
    values = [code_harness.probe_values(results[i].stdout) for i in order]
    secret = secrets.token_hex(16)
    judge = run_in_sandbox(
        code_harness.JUDGE_PROGRAM, stdin=code_harness.judge_stdin([splits[i] for i in order], secret, values), **limits
    )
    if judge.infra_error:
        return {"judge": judge}
    found = code_harness.judge_verdicts(judge.stdout, secret, len(order))
    if not judge.ok:
        why = judge.killed_reason or _last_line(judge.stderr) or f"exit code {judge.exit_code}"
        found = [(ok, reason if ok else f"{reason} (judge: {why})") for ok, reason in found]
    return dict(zip(order, found))


@reward_function
def code_execution(
    messages: list[Message],
    ground_truth: Any = None,
    test_cases: Any = None,
    workers: int = 4,
    timeout: float = 5.0,
    binary: bool = False,
    threshold: float = 1.0,
    memory_mb: int = 512,
    **kwargs,
) -> EvaluateResult:
    """Fraction of test cases passed by the last ```python block of the completion, run in the sandbox.

    Test cases are the ``test_cases`` keyword, else ``ground_truth`` (a list or a JSON string of
    one): ``{"input": stdin, "output": expected stdout}`` (stdout compared with trailing
    whitespace ignored) or an assert test string. Assert tests go through ``code_harness``: the
    solution runs with only the calls the asserts make, its values come back as plain data, and a
    separate judge sandbox (no solution code, a per-run secret) checks them; an early exit
    (``os._exit``, ``sys.exit``, ``atexit``) or a non-plain value fails the case, and a test the
    harness cannot split safely is an error. Each case runs through ``sandbox/runner.run_many``
    (``workers``, ``timeout`` seconds, ``memory_mb``); a timeout or memory kill fails that case
    and is named in ``reason``. A sandbox that could not start the program is an error, not 0.0.
    ``binary=True``: 1.0 if the fraction >= ``threshold`` else 0.0. No code block scores 0.0.
    """
    raw_cases = test_cases if test_cases is not None else ground_truth
    try:
        cases = _maybe_json(raw_cases)
        if isinstance(cases, dict) and ("input" in cases or "output" in cases):
            cases = [cases]
        if not isinstance(cases, list) or not cases:
            raise ValueError("expected a non-empty list of test cases")
        for i, c in enumerate(cases):
            if not (isinstance(c, str) or (isinstance(c, dict) and "output" in c)):
                raise ValueError(f"test case {i} must be an assert string or {{'input', 'output'}}")
    except (ValueError, json.JSONDecodeError) as err:
        return EvaluateResult(
            score=0.0,
            is_score_valid=False,
            reason=f"bad test cases: {err}",
            error=f"code_execution: bad test cases: {err}",
        )

    code = extract_python_block(_completion(messages))
    if code is None:
        return EvaluateResult(
            score=0.0,
            reason="no ```python code block in the completion",
            metrics={"pass_fraction": MetricResult(score=0.0, reason="no code block")},
        )

    try:
        splits = {i: code_harness.split_test(c, code) for i, c in enumerate(cases) if isinstance(c, str)}
    except code_harness.UnsupportedTest as err:
        return EvaluateResult(
            score=0.0,
            is_score_valid=False,
            reason=f"unsupported test: {err}",
            error=f"code_execution: unsupported test: {err}",
        )
    programs = [code_harness.PROBE_PROGRAM if i in splits else code for i in range(len(cases))]
    stdins = [
        code_harness.child_stdin(code, splits[i]) if i in splits else str(c.get("input", "") or "")
        for i, c in enumerate(cases)
    ]
    limits = dict(timeout_s=float(timeout), cpu_s=max(1, math.ceil(float(timeout))) + 1, memory_mb=int(memory_mb))
    results = run_many(programs, workers=int(workers), stdins=stdins, **limits)
    verdicts = _assert_verdicts(splits, results, limits) if splits else {}
    infra = next((r.infra_error for r in [*results, *verdicts.values()] if getattr(r, "infra_error", None)), None)
    if infra:  # the program never ran: no opinion, and the error is counted upstream
        return EvaluateResult(score=0.0, is_score_valid=False, reason=infra, error=f"code_execution: {infra}")

    metrics: dict[str, MetricResult] = {}
    failures: list[str] = []
    passed = 0
    for i, (c, res) in enumerate(zip(cases, results)):
        if res.killed_reason is not None or res.timed_out:
            ok, why = False, _kill_text(res, float(timeout))
        elif i in splits and not splits[i].probe_count:  # nothing of the solution's is called: nothing judged
            ok, why = False, "the test calls nothing the solution defines"
        elif i in splits:
            ok, why = verdicts[i]
        elif res.exit_code != 0:
            ok, why = False, f"exit code {res.exit_code}: {_last_line(res.stderr) or 'no stderr'}"
        elif _norm_out(res.stdout) == _norm_out(c["output"]):
            ok, why = True, "output matches"
        else:
            ok, why = (
                False,
                (
                    f"wrong output: expected {_short(_norm_out(c['output']), 60)!r}, "
                    f"got {_short(_norm_out(res.stdout), 60)!r}"
                ),
            )
        passed += ok
        metrics[f"case_{i}"] = MetricResult(score=float(ok), reason=why)
        if not ok:
            failures.append(f"case {i}: {why}")

    fraction = passed / len(cases)
    metrics["pass_fraction"] = MetricResult(score=fraction)
    score = (1.0 if fraction >= threshold else 0.0) if binary else fraction
    reason = f"passed {passed}/{len(cases)} test cases"
    if binary:
        reason += f" (binary, threshold {threshold:g})"
    if failures:
        reason += "; " + "; ".join(failures)
    if results and results[0].backend != "bwrap":
        reason += " [sandbox: rlimits only]"
    return EvaluateResult(score=score, reason=reason, metrics=metrics)


BUILTIN_STRUCTURED = {
    "json_schema": json_schema,
    "tool_call_match": tool_call_match,
    "code_execution": code_execution,
}
