"""Running one episode's tool calls: schema checks, a per-call timeout, and errors as answers.

A :class:`ToolSession` belongs to one episode (stateful tools such as ``python`` keep their state in
it, so two episodes never share any). Every call ends in a :class:`ToolOutcome` whose ``content`` is
what the model reads next as the ``tool`` message. Nothing a tool does stops the run: a malformed
call, an unknown tool, arguments that do not fit the schema, an exception, a timeout or a sandbox
that cannot start each become an error message and an ``error`` kind that the metrics count.

In-process tools run on a thread of their own per call, waited for ``timeout_s``; a call that
overruns is answered with a timeout error and its thread is abandoned (a Python thread cannot be
killed) and counted (``stalled_calls``, the metric ``tools/stalled_calls``). Abandoned threads are
daemons: they hold no slot of a shared pool, so later calls (built-ins included) still run, and they
never keep the trainer from exiting. A tool with ``MAX_STALLED_PER_TOOL`` calls still running is
not called again (each further call is a timeout error at once), so a tool that always hangs cannot
grow threads without bound. A tool that may hang belongs in the sandbox, whose timeout kills it.
A result is made ``safe_text.encodable`` (a lone surrogate becomes U+FFFD) before the template and the
tokenizer see it.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass

from grouprl.safe_text import encodable
from grouprl.tools.parsers import ToolCall
from grouprl.tools.python_tool import PythonInterpreter
from grouprl.tools.sandboxed import SandboxedFileTool
from grouprl.tools.schema import Tool, ToolArgumentError

# Error kinds. The first three are the model's mistakes (tools/invalid_call_rate); the others are the tool's.
INVALID_KINDS = ("malformed", "unknown_tool", "bad_arguments")
ERROR_KINDS = INVALID_KINDS + ("raised", "timeout", "sandbox")
MAX_RESULT_CHARS = 2000

MAX_STALLED_PER_TOOL = 16  # abandoned calls of one tool still running; past it the tool is not called

_STALLED: Counter[str] = Counter()  # tool name -> its calls that overran and are still running
_STALLED_LOCK = threading.Lock()


def stalled_calls(tool_name: str | None = None) -> int:
    """In-process tool calls (of ``tool_name``, or of any tool) that overran their timeout and have not
    returned yet, in this process."""
    with _STALLED_LOCK:
        return _STALLED[tool_name] if tool_name else sum(_STALLED.values())


@dataclass
class ToolOutcome:
    name: str  # the tool called ("" for a call that could not be read)
    arguments: object
    content: str  # what the model reads as the tool message
    error: str | None = None  # one of ERROR_KINDS, or None
    call_id: str = ""

    def as_message(self) -> dict:
        message = {"role": "tool", "content": self.content}
        if self.name:
            message["name"] = self.name
        if self.call_id:
            message["tool_call_id"] = self.call_id
        return message


class ToolSession:
    """The tools of one episode, and the state of its stateful ones."""

    def __init__(self, tools: list[Tool], timeout_s: float = 10.0, sandbox_backend: str = "auto"):
        self.tools = {t.name: t for t in tools}
        self.timeout_s, self.sandbox_backend = timeout_s, sandbox_backend
        # tool name -> its sandboxed runner (the interpreter's state)
        self._runners: dict[str, PythonInterpreter | SandboxedFileTool] = {}

    def malformed(self, reason: str) -> ToolOutcome:
        return ToolOutcome("", None, f"Error: {reason}", "malformed")

    def call(self, call: ToolCall) -> ToolOutcome:
        tool = self.tools.get(call.name)
        if tool is None:
            return ToolOutcome(
                call.name,
                call.arguments,
                f"Error: unknown tool '{call.name}'; available: {', '.join(self.tools)}",
                "unknown_tool",
                call.id,
            )
        try:
            arguments = tool.check_arguments(call.arguments)
        except ToolArgumentError as err:
            return ToolOutcome(call.name, call.arguments, f"Error: {err}", "bad_arguments", call.id)
        content, error = self._sandboxed(tool, arguments) if tool.sandboxed else self._in_process(tool, arguments)
        return ToolOutcome(call.name, arguments, _cap(encodable(content)), error, call.id)

    def _in_process(self, tool: Tool, arguments: dict) -> tuple[str, str | None]:
        with _STALLED_LOCK:
            stalled = _STALLED[tool.name]
        if stalled >= MAX_STALLED_PER_TOOL:
            return (
                f"Error: tool '{tool.name}' has {stalled} earlier calls that never returned; it is not called again"
            ), "timeout"
        call = _ThreadCall(tool, arguments)
        if not call.finished(self.timeout_s):
            return f"Error: timed out after {self.timeout_s:g} s", "timeout"
        if call.error is not None:  # the tool's own failure is the model's answer, not ours
            return f"Error: {type(call.error).__name__}: {call.error}", "raised"
        value = call.value
        return (value if isinstance(value, str) else json.dumps(value, default=str)), None

    def _sandboxed(self, tool: Tool, arguments: dict) -> tuple[str, str | None]:
        runner = self._runners.get(tool.name)
        if runner is None:
            if tool.stateful:  # the python interpreter: per-episode cells
                runner = PythonInterpreter(self.timeout_s, backend=self.sandbox_backend)
            else:
                runner = SandboxedFileTool(tool.source, self.timeout_s)  # a user's file: bwrap or nothing
            self._runners[tool.name] = runner
        if isinstance(runner, PythonInterpreter):  # stateful: per-episode cells
            return runner(**arguments)
        return runner(arguments)


class _ThreadCall:
    """One in-process call on a daemon thread of its own; abandoned (and counted) when it overruns."""

    def __init__(self, tool: Tool, arguments: dict):
        self.tool, self.arguments = tool, arguments
        self.value: object = None
        self.error: BaseException | None = None
        self.done, self.abandoned = False, False
        self._finished = threading.Event()
        threading.Thread(target=self._run, daemon=True, name=f"grouprl-tool-{tool.name}").start()

    def _run(self) -> None:
        try:
            self.value = self.tool.fn(**self.arguments)
        except BaseException as err:  # noqa: BLE001 - SystemExit in a tool is the tool's failure too
            self.error = err
        finally:
            with _STALLED_LOCK:  # done and the stalled count change together (see finished)
                self.done = True
                if self.abandoned:
                    _STALLED[self.tool.name] -= 1
            self._finished.set()

    def finished(self, timeout_s: float) -> bool:
        """Whether the call returned within ``timeout_s``; if not, it is abandoned and counted."""
        self._finished.wait(timeout_s)
        with _STALLED_LOCK:
            if not self.done:
                self.abandoned = True
                _STALLED[self.tool.name] += 1
            return self.done


def _cap(text: str) -> str:
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + " ...[truncated]"
