"""The test cases of ``code_execution`` (``structured.py``): reading them from the row, running each in the
sandbox (a stdin/stdout case runs the program itself; an assert case runs the solution with its probes,
then one judge sandbox decides every assert, see ``sandbox/code_harness.py``), and turning the results
into a verdict per case and the reward's score and reason.
"""

from __future__ import annotations

import math
import secrets
from typing import Any

from grouprl.records import EvaluateResult, MetricResult
from grouprl.rewards.builtin.completion_blocks import maybe_json, short_text
from grouprl.rewards.sandbox import code_harness
from grouprl.rewards.sandbox.assert_split import SplitTest
from grouprl.rewards.sandbox.runner import run_in_sandbox, run_many


def read_test_cases(raw_cases: Any) -> list:
    """The test cases (a list, or its JSON text): assert strings or ``{"input", "output"}`` objects;
    ``ValueError`` (or ``json.JSONDecodeError``) naming what is wrong."""
    cases = maybe_json(raw_cases)
    if isinstance(cases, dict) and ("input" in cases or "output" in cases):
        cases = [cases]
    if not isinstance(cases, list) or not cases:
        raise ValueError("expected a non-empty list of test cases")
    for i, c in enumerate(cases):
        if not (isinstance(c, str) or (isinstance(c, dict) and "output" in c)):
            raise ValueError(f"test case {i} must be an assert string or {{'input', 'output'}}")
    return cases


def sandbox_limits(timeout: float, memory_mb: int) -> dict[str, Any]:
    """``run_in_sandbox``'s limits for one case: the wall clock, CPU seconds just past it, memory."""
    return dict(timeout_s=float(timeout), cpu_s=max(1, math.ceil(float(timeout))) + 1, memory_mb=int(memory_mb))


def run_cases(
    cases: list, code: str, splits: dict[int, SplitTest], workers: int, limits: dict[str, Any]
) -> tuple[list, dict]:
    """Every case in its own sandbox (``workers`` at once): the results in the cases' order, and the assert
    cases' verdicts from the judge (see ``_assert_verdicts``)."""
    programs = [code_harness.PROBE_PROGRAM if i in splits else code for i in range(len(cases))]
    stdins = [
        code_harness.child_stdin(code, splits[i]) if i in splits else str(c.get("input", "") or "")
        for i, c in enumerate(cases)
    ]
    results = run_many(programs, workers=int(workers), stdins=stdins, **limits)
    verdicts = _assert_verdicts(splits, results, limits) if splits else {}
    return results, verdicts


def infra_error(results: list, verdicts: dict) -> str | None:
    """The first run the sandbox could not start (a case's or the judge's), else None."""
    return next((r.infra_error for r in [*results, *verdicts.values()] if getattr(r, "infra_error", None)), None)


def score_cases(
    cases: list, results: list, splits: dict, verdicts: dict, timeout: float, binary: bool, threshold: float
) -> EvaluateResult:
    """The fraction of cases passed (or 1.0/0.0 against ``threshold`` when ``binary``), a metric per case,
    and a reason naming each failure."""
    metrics: dict[str, MetricResult] = {}
    failures: list[str] = []
    passed = 0
    for i, (c, res) in enumerate(zip(cases, results)):
        ok, why = _case_verdict(i, c, res, splits, verdicts, timeout)
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


def _case_verdict(i: int, case: Any, res, splits: dict, verdicts: dict, timeout: float) -> tuple[bool, str]:
    """(passed, why) of case ``i`` from its run (and, for an assert case, the judge's verdict)."""
    if res.killed_reason is not None or res.timed_out:
        return False, _kill_text(res, float(timeout))
    if i in splits and not splits[i].probe_count:  # nothing of the solution's is called: nothing judged
        return False, "the test calls nothing the solution defines"
    if i in splits:
        return verdicts[i]
    if res.exit_code != 0:
        return False, f"exit code {res.exit_code}: {_last_line(res.stderr) or 'no stderr'}"
    if _norm_out(res.stdout) == _norm_out(case["output"]):
        return True, "output matches"
    return (
        False,
        (
            f"wrong output: expected {short_text(_norm_out(case['output']), 60)!r}, "
            f"got {short_text(_norm_out(res.stdout), 60)!r}"
        ),
    )


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
    return short_text(lines[-1], 160) if lines else ""


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
