"""Running one episode's tool calls: schema checks, a per-call timeout, and errors as answers.

A :class:`ToolSession` belongs to one episode (stateful tools such as ``python`` keep their state in
it, so two episodes never share any). Every call ends in a :class:`ToolOutcome` whose ``content`` is
what the model reads next as the ``tool`` message. Nothing a tool does stops the run: a malformed
call, an unknown tool, arguments that do not fit the schema, an exception, a timeout or a sandbox
that cannot start each become an error message and an ``error`` kind that the metrics count.

In-process tools run on a worker thread and are waited for ``timeout_s``; a call that overruns is
answered with a timeout error and its thread is left to finish on its own (a Python thread cannot
be killed: a tool that may hang forever belongs in the sandbox, whose timeout kills the process).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from grouprl.tools.parsers import ToolCall
from grouprl.tools.python_tool import PythonInterpreter
from grouprl.tools.sandboxed import SandboxedFileTool
from grouprl.tools.schema import Tool, ToolArgumentError

# Error kinds. The first three are the model's mistakes (tools/invalid_call_rate); the others are the tool's.
INVALID_KINDS = ("malformed", "unknown_tool", "bad_arguments")
ERROR_KINDS = INVALID_KINDS + ("raised", "timeout", "sandbox")
MAX_RESULT_CHARS = 2000

_WORKERS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="grouprl-tool")


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
            return ToolOutcome(call.name, call.arguments, f"Error: unknown tool '{call.name}'; available: "
                               f"{', '.join(self.tools)}", "unknown_tool", call.id)
        try:
            arguments = tool.check_arguments(call.arguments)
        except ToolArgumentError as err:
            return ToolOutcome(call.name, call.arguments, f"Error: {err}", "bad_arguments", call.id)
        content, error = self._sandboxed(tool, arguments) if tool.sandboxed else self._in_process(tool, arguments)
        return ToolOutcome(call.name, arguments, _cap(content), error, call.id)

    def _in_process(self, tool: Tool, arguments: dict) -> tuple[str, str | None]:
        future = _WORKERS.submit(tool.fn, **arguments)
        try:
            value = future.result(timeout=self.timeout_s)
        except FutureTimeout:
            return f"Error: timed out after {self.timeout_s:g} s", "timeout"
        except Exception as err:  # noqa: BLE001 - the tool's own failure is the model's answer, not ours
            return f"Error: {type(err).__name__}: {err}", "raised"
        return (value if isinstance(value, str) else json.dumps(value, default=str)), None

    def _sandboxed(self, tool: Tool, arguments: dict) -> tuple[str, str | None]:
        runner = self._runners.get(tool.name)
        if runner is None:
            if tool.stateful:  # the python interpreter: per-episode cells
                runner = PythonInterpreter(self.timeout_s, backend=self.sandbox_backend)
            else:
                runner = SandboxedFileTool(tool.source, self.timeout_s, backend=self.sandbox_backend)
            self._runners[tool.name] = runner
        if isinstance(runner, PythonInterpreter):  # stateful: per-episode cells
            return runner(**arguments)
        return runner(arguments)


def _cap(text: str) -> str:
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + " ...[truncated]"
