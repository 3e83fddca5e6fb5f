"""A test harness for assert-style code tests that the tested program cannot short-circuit.

Appending ``assert f(2) == 4`` to the program and counting "exit 0" as a pass rewards a program
that calls ``os._exit(0)``, reads its own file, returns an always-equal object or patches ``print``.
Whatever runs in the program's process is the program's, so the verdict is made elsewhere:

1. Each test is split (``assert_split.split_test``) into what must run with the solution and what
   must not. ``assert sorted(f(x)) == [1, 2]`` becomes the *probe* ``f(x)`` (a value computed by the
   solution's code) and the *check* ``sorted(V0) == [1, 2]``. A name the solution defines is
   the solution's, always, even when it is also a builtin or a standard-library module's name
   (``max``, ``sorted``, ``calendar``): plain Python would call the solution's, and a solution
   that does not define it fails instead of being judged by the builtin. Other names the test
   does not define, that are not builtins and not standard-library modules, are the solution's
   too; its standard-library imports (``from collections import Counter``) are repeated on the
   judge's side. Test helpers the probes need cross cut down to what the probes read
   (``assert_split._child_data``). A test that calls nothing of the solution's judges nothing: it
   fails.
2. The solution runs in one sandbox with only the probes (``programs/probe.py``): it prints the
   probes' values as plain data after a marker: None, bool, int, float, str, bytes, list,
   tuple, dict, set, and the standard library's own types (Counter, defaultdict, namedtuple,
   deque, range, iterators, Decimal, Fraction, dates), exact types, rebuilt fresh by the judge,
   so no object of its own can cross. The expected values are in no file and no input it can
   see; an early exit leaves no values, which fails the case.
3. A second sandbox runs only the checks on the decoded values (``programs/judge.py``), with no
   solution code in it. It receives a fresh per-run secret on stdin after every solution run
   has ended, and prints ``secret:case:pass`` only after a case's last assert held.

Tests the split cannot express safely (a solution value inside a lambda/comprehension variable,
an ``assert`` inside code that must run with the solution, e.g. HumanEval's ``check(candidate)``,
a helper holding both inputs and expected values) raise ``UnsupportedTest``: an error, never a score.

This module holds what crosses between the sandboxes: the two programs, what each reads on stdin, the
probe values the solution's side printed and the judge's verdicts.
"""

from __future__ import annotations

import json
from pathlib import Path

from grouprl.rewards.sandbox.assert_split import VALUES_NAME, SplitTest

MARK = "__GROUPRL_PROBE_VALUES__"


PROGRAMS = Path(__file__).with_name("programs")
PROBE_PROGRAM = (PROGRAMS / "probe.py").read_text(encoding="utf-8")
JUDGE_PROGRAM = (PROGRAMS / "judge.py").read_text(encoding="utf-8")


def child_stdin(solution: str, split: SplitTest) -> str:
    """What ``PROBE_PROGRAM`` reads: the solution and its probes (no expected value among them)."""
    return (
        json.dumps(
            {
                "solution": solution,
                "ops": split.child_ops,
                "modules": sorted(split.modules),
                "required": sorted(split.required),
                "mark": MARK,
            }
        )
        + "\n"
    )


def probe_values(stdout: str) -> str | None:
    """The probe results a child printed (a JSON list ``[{"v": ...} | {"e": ...}]``, as its text), or
    None if it printed none or nothing readable. Numbers stay text here (``parse_int=str``): a long
    integer is the judge's to compare, not an error of this process's int() limit."""
    if MARK not in stdout:
        return None
    line = stdout.rsplit(MARK, 1)[1].split("\n", 1)[0]
    try:  # the program wrote this: any text (deep nesting, huge numbers) is its failure, never ours
        values = json.loads(line, parse_int=str)
    except (ValueError, RecursionError):
        return None
    return line if isinstance(values, list) else None


def judge_stdin(splits: list[SplitTest], secret: str, values: list[str | None]) -> str:
    """What ``JUDGE_PROGRAM`` reads: every case's checks, the secret line, then the probe values."""
    cases = [(s.judge_ops, sorted(s.modules), s.setup) for s in splits]
    raw = "[" + ",".join("null" if v is None else v for v in values) + "]"
    return json.dumps({"cases": cases, "name": VALUES_NAME}) + "\n" + secret + "\n" + raw + "\n"


def judge_verdicts(stdout: str, secret: str, n: int) -> list[tuple[bool, str]]:
    """(passed, reason) per case from the judge's output; a case passes only with the secret."""
    out: list[tuple[bool, str]] = [(False, "no verdict from the judge")] * n
    for line in stdout.split("\n"):  # the judge's own lines; a value's text is never a line of its own
        head, _, rest = line.partition(":")
        if head == secret:
            case, _, word = rest.partition(":")
            if _case_number(case, n) is not None and word == "pass":
                out[int(case)] = (True, "assert passed")
        elif _case_number(head, n) is not None and rest.startswith("fail:"):
            out[int(head)] = (False, rest[len("fail:") :].strip())
    return out


def _case_number(text: str, n: int) -> int | None:
    """``text`` as a case number below ``n``: ASCII digits only, and short (``'²'.isdigit()`` is true)."""
    if not (0 < len(text) <= 9 and text.isascii() and text.isdigit()):
        return None
    return int(text) if int(text) < n else None
