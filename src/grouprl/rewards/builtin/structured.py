"""Built-in typed rewards for structured outputs: JSON schema, tool calls, executed code.

All three are pointwise ``@reward_function``s: they score ``messages[-1]`` (the completion),
take their options as keyword arguments with defaults, ignore unknown keyword arguments (the
other fields of a sample are passed to every reward) and always set ``reason``.
"""

from __future__ import annotations

import json
from typing import Any

from grouprl.records import EvaluateResult, Message, MetricResult
from grouprl.rewards.builtin.answers import completion_text
from grouprl.rewards.builtin.code_cases import infra_error, read_test_cases, run_cases, sandbox_limits, score_cases
from grouprl.rewards.builtin.completion_blocks import extract_json, extract_python_block, maybe_json, short_text
from grouprl.rewards.builtin.tool_call_compare import compare_calls, normalize_calls
from grouprl.rewards.kit import reward_function
from grouprl.rewards.sandbox.assert_split import UnsupportedTest, split_test

__all__ = ["json_schema", "tool_call_match", "code_execution", "BUILTIN_STRUCTURED"]


def _no_opinion(reason: str, error: str) -> EvaluateResult:
    """A result that is no score: the reward could not judge (its options or the row are at fault)."""
    return EvaluateResult(score=0.0, is_score_valid=False, reason=reason, error=error)


# --------------------------------------------------------------------------- json_schema


def _checked_schema(raw_schema: Any):
    """(schema, its validator class); ``ValueError`` or ``jsonschema.SchemaError`` when it is no valid schema."""
    import jsonschema

    sch = maybe_json(raw_schema)
    if not isinstance(sch, (dict, bool)):
        raise ValueError(f"schema must be a JSON object, got {type(sch).__name__}")
    validator_cls = jsonschema.validators.validator_for(sch)
    validator_cls.check_schema(sch)
    return sch, validator_cls


def _schema_failure(errors: list) -> EvaluateResult:
    """0.0, with the best-matching validation error (and how many more there are) as the reason."""
    import jsonschema

    best = jsonschema.exceptions.best_match(errors)
    where = "/".join(str(p) for p in best.absolute_path) or "<root>"
    reason = f"schema validation failed at {where}: {short_text(best.message)}"
    if len(errors) > 1:
        reason += f" (+{len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return EvaluateResult(
        score=0.0,
        reason=reason,
        metrics={"parsed": MetricResult(score=1.0), "valid": MetricResult(score=0.0, reason=reason)},
    )


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
        return _no_opinion("no schema (pass schema= or ground_truth)", "json_schema: no schema given")
    try:
        sch, validator_cls = _checked_schema(raw_schema)
    except (ValueError, jsonschema.SchemaError) as err:
        msg = getattr(err, "message", None) or str(err)
        return _no_opinion(f"invalid schema: {short_text(msg)}", f"json_schema: invalid schema: {short_text(msg)}")
    try:
        value = extract_json(completion_text(messages))
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
    if errors:
        return _schema_failure(errors)
    return EvaluateResult(
        score=1.0,
        reason="JSON is valid against the schema",
        metrics={"parsed": MetricResult(score=1.0), "valid": MetricResult(score=1.0)},
    )


# --------------------------------------------------------------------------- tool_call_match


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
        return _no_opinion(
            f"unknown mode {mode!r}", f"tool_call_match: mode must be 'exact' or 'jaccard', got {mode!r}"
        )
    if ground_truth is None:
        return _no_opinion("no expected tool calls (ground_truth)", "tool_call_match: no ground_truth")
    try:
        expected = normalize_calls(maybe_json(ground_truth), "ground_truth")
    except (ValueError, json.JSONDecodeError) as err:
        return _no_opinion(f"bad ground_truth: {err}", f"tool_call_match: bad ground_truth: {err}")
    last = messages[-1] if messages else None
    try:
        if last is not None and last.tool_calls:
            actual = normalize_calls(last.tool_calls, "tool_calls")
        else:
            actual = normalize_calls(extract_json(completion_text(messages)), "completion")
    except ValueError as err:
        return EvaluateResult(score=0.0, reason=f"no parsable tool calls: {err}")
    return compare_calls(actual, expected, mode)


# --------------------------------------------------------------------------- code_execution


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
    The phases (read, run, score the cases) are in ``code_cases.py``.
    """
    try:
        cases = read_test_cases(test_cases if test_cases is not None else ground_truth)
    except (ValueError, json.JSONDecodeError) as err:
        return _no_opinion(f"bad test cases: {err}", f"code_execution: bad test cases: {err}")
    code = extract_python_block(completion_text(messages))
    if code is None:
        return EvaluateResult(
            score=0.0,
            reason="no ```python code block in the completion",
            metrics={"pass_fraction": MetricResult(score=0.0, reason="no code block")},
        )
    try:
        splits = {i: split_test(c, code) for i, c in enumerate(cases) if isinstance(c, str)}
    except UnsupportedTest as err:
        return _no_opinion(f"unsupported test: {err}", f"code_execution: unsupported test: {err}")
    results, verdicts = run_cases(cases, code, splits, workers, sandbox_limits(timeout, memory_mb))
    infra = infra_error(results, verdicts)
    if infra:  # the program never ran: no opinion, and the error is counted upstream
        return _no_opinion(infra, f"code_execution: {infra}")
    return score_cases(cases, results, splits, verdicts, timeout, binary, threshold)


BUILTIN_STRUCTURED = {
    "json_schema": json_schema,
    "tool_call_match": tool_call_match,
    "code_execution": code_execution,
}
