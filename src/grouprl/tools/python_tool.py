"""The sandboxed ``python`` code-interpreter tool, with state that lives as long as one episode.

Every call runs in a fresh bubblewrap sandbox (``rewards/sandbox``: empty root, no network, a
private ``/tmp``, seccomp, rlimits, a wall-clock timeout), so a call cannot read the host's files
or another episode's variables: nothing is shared between sandboxes. The episode's state is kept
the way a notebook's would be rebuilt after a restart: the interpreter remembers the cells that
ran without error, and each call replays them (their output discarded) before running the new
cell. Variables, functions and imports therefore carry over from call to call within an episode,
and only within it. Replays cost time (the k-th call re-runs k-1 cells, all inside its timeout);
a cell whose result depends on chance or time may compute a different value on replay.

The last line of a cell is shown like a notebook's when it is an expression; errors come back as
the exception's last line, a timeout as ``Error: timed out``. These are answers to the model,
never exceptions in the trainer.
"""

from __future__ import annotations

import json

from grouprl.rewards.sandbox.runner import run_in_sandbox

MAX_OUTPUT_CHARS = 2000

# Runs inside the sandbox. Earlier cells first, output swallowed; then the new one, its last
# expression printed. Tracebacks go to stderr; the exit code says whether the new cell failed.
REPLAY = r"""
import ast, contextlib, io, json, sys, traceback
cells = json.loads(sys.stdin.read())
scope = {"__name__": "__main__"}
for cell in cells[:-1]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        exec(compile(cell, "<cell>", "exec"), scope)
try:
    tree = ast.parse(cells[-1], "<cell>", "exec")
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<cell>", "exec"), scope)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), scope)
        if value is not None:
            print(repr(value))
except BaseException as err:
    sys.stderr.write("".join(traceback.format_exception_only(type(err), err)))
    sys.exit(1)
"""


def python(code: str) -> str:
    """Run Python code and return what it prints (the last line's value is shown when it is an expression).

    Args:
        code: the Python code to run; variables persist between calls in the same conversation
    """
    raise RuntimeError("the python tool runs through a PythonInterpreter (one per episode), not directly")


class PythonInterpreter:
    """One episode's interpreter: the cells that ran, replayed in a new sandbox at every call."""

    def __init__(self, timeout_s: float = 10.0, memory_mb: int = 512, backend: str = "auto"):
        self.timeout_s, self.memory_mb, self.backend = timeout_s, memory_mb, backend
        self.cells: list[str] = []

    def __call__(self, code: str) -> tuple[str, str | None]:
        """(what the model reads, error kind or None): kinds are ``raised``, ``timeout``, ``sandbox``."""
        if not isinstance(code, str) or not code.strip():
            return "Error: empty code", "raised"
        result = run_in_sandbox(
            REPLAY,
            stdin=json.dumps(self.cells + [code]),
            timeout_s=self.timeout_s,
            cpu_s=max(1, int(self.timeout_s) + 1),
            memory_mb=self.memory_mb,
            backend=self.backend,
        )
        if result.infra_error:  # the sandbox did not start: the call failed, the model is told so
            return "Error: the interpreter could not start", "sandbox"
        if result.timed_out:
            return f"Error: timed out after {self.timeout_s:g} s", "timeout"
        out = result.stdout
        if not result.ok:
            lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
            reason = lines[-1] if lines else (result.killed_reason or f"exit code {result.exit_code}")
            return _cap((out + "Error: " + reason).strip()), "raised"
        self.cells.append(code)
        return _cap(out.strip()) if out.strip() else "(no output)", None


def _cap(text: str) -> str:
    return text if len(text) <= MAX_OUTPUT_CHARS else text[:MAX_OUTPUT_CHARS] + " ...[truncated]"
