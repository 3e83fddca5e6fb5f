"""math-verify in a process that can be killed: the budget of a math reward is a real budget.

math-verify limits its own parsing and comparison with ``signal.alarm``, which works only in a
main thread, and rewards run in the scorer's worker thread; and sympy can compute in C while
holding the GIL (``\\boxed{9^{9^{9}}}``), where no Python-level limit fires at all. So every
parse and comparison runs in a worker process (``math_judge_worker.py``, kept between calls, one
per concurrent caller): a request that has not answered within its budget kills its worker, and
the sample scores as not correct (a garbage answer is a wrong answer). A worker that cannot start
(math-verify missing) is an error, never a score.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

WORKER = str(Path(__file__).with_name("math_judge_worker.py"))
START_TIMEOUT_S = 120.0  # importing sympy on a busy machine; not counted against any request
_idle: list[subprocess.Popen] = []
_all: set[subprocess.Popen] = set()
_lock = threading.Lock()
_owner = [os.getpid()]  # a forked child must not share its parent's workers (their pipes would interleave)


@dataclass(frozen=True)
class MathVerdict:
    gold: str | None  # the parsed gold (None without a note: the gold cannot be parsed, no opinion)
    answer: str | None  # the parsed answer (None: nothing found)
    correct: bool
    note: str | None = None  # why it is not correct beyond a mismatch (killed after its budget...)


class MathJudgeUnavailable(RuntimeError):
    """The math-verify worker could not start: an error of the reward, never a score."""


def _start() -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-I", WORKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    line = _read_line(proc, START_TIMEOUT_S)
    if line is None or not line.startswith('{"ready"'):
        err = _kill(proc)
        raise MathJudgeUnavailable(
            f"math-verify worker did not start: {err or 'no ready line'} (pip install math-verify)"
        )
    with _lock:
        _all.add(proc)
    return proc


def _read_line(proc: subprocess.Popen, timeout_s: float) -> str | None:
    assert proc.stdout is not None  # _start opens it as a pipe
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            line = proc.stdout.readline()
            return line or None  # '' = the worker died


def _send(proc: subprocess.Popen, request: dict) -> None:
    assert proc.stdin is not None  # _start opens it as a pipe
    proc.stdin.write(json.dumps(request) + "\n")
    proc.stdin.flush()


def _kill(proc: subprocess.Popen) -> str:
    try:
        proc.kill()
        proc.wait(timeout=10)
        err = proc.stderr.read()[-300:] if proc.stderr else ""
    except (OSError, subprocess.SubprocessError, ValueError):
        err = ""
    with _lock:
        _all.discard(proc)
    return err.strip().splitlines()[-1] if err.strip() else ""


@atexit.register
def _stop_all() -> None:
    with _lock:
        procs = list(_all)
    for proc in procs:
        _kill(proc)


def judge(completion: str | None, ground_truth, timeout_seconds: float = 5.0) -> MathVerdict:
    """Parse the gold and the completion's answer and compare them, within
    ``3 * timeout_seconds + 1`` seconds of wall clock (gold, answer, comparison)."""
    if ground_truth is None or not str(ground_truth).strip():
        return MathVerdict(None, None, False)
    budget = 3 * max(float(timeout_seconds), 1.0) + 1.0
    with _lock:
        if _owner[0] != os.getpid():  # forked since: the parent's workers are the parent's
            _owner[0] = os.getpid()
            _idle.clear()
            _all.clear()
        proc = _idle.pop() if _idle else None
    if proc is None or proc.poll() is not None:
        proc = _start()
    request = {"completion": completion, "gold": str(ground_truth), "timeout": max(1, int(timeout_seconds))}
    try:
        _send(proc, request)
    except OSError:  # died since its last answer: one fresh try
        _kill(proc)
        proc = _start()
        _send(proc, request)
    line = _read_line(proc, budget)
    if line is None:
        _kill(proc)
        return MathVerdict(
            None, None, False, f"math-verify did not finish within {budget:g}s (killed; scored as not correct)"
        )
    with _lock:
        _idle.append(proc)
    out = json.loads(line)
    if "error" in out:
        return MathVerdict(None, None, False, f"math-verify failed: {out['error']} (scored as not correct)")
    return MathVerdict(out["gold"], out["answer"], bool(out["correct"]))


def gold_parses(ground_truth, timeout_seconds: float = 5.0) -> bool:
    """Whether math-verify finds an answer in ``ground_truth`` (a gold row is usable)."""
    return judge(None, ground_truth, timeout_seconds).gold is not None
