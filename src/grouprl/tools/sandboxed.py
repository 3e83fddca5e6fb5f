"""A user's tool from a file, called inside the bubblewrap sandbox (``tool_sandbox: true``).

With ``tool_sandbox`` on, no user tool code runs in the trainer's process, as with
``sandbox_user_rewards``: a ``path/to/file.py:function`` is never imported here (its schema is read
in a sandbox run of the file, :func:`sandboxed_user_tool`), and any other form that would be imported
(``package.module:function`` outside grouprl, a ``.pyc``/``.so``, a path without ``.py``) is refused.
Each call runs the file's source in a fresh bubblewrap sandbox (never the rlimits fallback) and calls
the function there with the JSON arguments; the result is read back from a line that starts with a
per-call random marker, so whatever else the tool prints cannot pose as its result.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from grouprl.rewards.sandbox.runner import run_in_sandbox
from grouprl.safe_text import JsonRejected, safe_json_loads
from grouprl.tools.schema import Tool
from grouprl.user_code import CodeRef, code_ref

CALL = r"""
import json as _json, sys as _sys
_request = _json.loads(_sys.stdin.read())
_result = globals()[_request["function"]](**_request["arguments"])
_sys.stdout.write("\n" + _request["marker"] + _json.dumps(_result if isinstance(_result, str) else repr(_result)) + "\n")
"""


SCHEMA = r"""
import json as _json, sys as _sys
_request = _json.loads(_sys.stdin.read())
_fn = globals().get(_request["function"])
if not callable(_fn):
    _out = {"error": "the file defines no function '%s'" % _request["function"]}
else:
    from transformers.utils import get_json_schema as _get_json_schema
    try:
        _out = {"schema": _get_json_schema(_fn)}
    except Exception as _err:
        _out = {"error": "no schema from its signature and docstring (%s: %s)" % (type(_err).__name__, _err)}
_sys.stdout.write("\n" + _request["marker"] + _json.dumps(_out) + "\n")
"""
SCHEMA_TIMEOUT_S = 120.0  # the file's imports and transformers' schema reader, once per tool at start


def sandboxed_user_tool(spec: str) -> Tool:
    """The tool ``spec`` names, run in the sandbox and never imported into this process; ``KeyError``
    (one line naming the spec) for a form that would be imported, or a file that cannot be a tool."""
    ref = code_ref(spec) or CodeRef(spec, "")
    where, function = ref.where, ref.function
    if not ref.is_source:
        raise KeyError(
            f"config key 'tools': tool '{spec}': tool_sandbox is on, but '{where}' is not a .py "
            "source file and would be imported into the trainer unsandboxed (refused); expected "
            "'path/to/file.py:function'"
        )
    path = Path(where)
    if not path.is_file():
        raise KeyError(f"config key 'tools': tool '{spec}': no such file {path}")
    source = path.read_text()
    try:
        compile(source, str(path), "exec")  # compiled, never executed here
    except (SyntaxError, ValueError) as err:
        lineno = getattr(err, "lineno", None)
        line = f" line {lineno}" if lineno else ""
        raise KeyError(
            f"config key 'tools': tool '{spec}': {path}{line}: {type(err).__name__}: {getattr(err, 'msg', err)}"
        ) from None
    marker = f"@@schema-{secrets.token_hex(8)}@@"
    result = run_in_sandbox(
        source + "\n" + SCHEMA,
        stdin=json.dumps({"function": function, "marker": marker}),
        timeout_s=SCHEMA_TIMEOUT_S,
        cpu_s=int(SCHEMA_TIMEOUT_S),
        memory_mb=2048,
        backend="bwrap",
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith(marker)]
    if result.infra_error or not result.ok or not lines:
        errors = [line for line in result.stderr.strip().splitlines() if line.strip()]
        why = result.infra_error or result.killed_reason or (errors[-1] if errors else f"exit code {result.exit_code}")
        raise KeyError(f"config key 'tools': tool '{spec}': running {path} in the sandbox failed: {why}")
    found = json.loads(lines[-1][len(marker) :])
    if "error" in found:
        raise KeyError(f"config key 'tools': tool '{spec}': {found['error']}")
    schema: dict[str, Any] = found["schema"]
    schema["function"].pop("return", None)  # as tools/schema.py: templates show parameters only
    return Tool(schema["function"]["name"], _runs_in_the_sandbox, schema, sandboxed=True, source=spec)


def _runs_in_the_sandbox(**arguments: Any) -> str:
    raise RuntimeError("a sandboxed tool is called through SandboxedFileTool, never in-process")


class SandboxedFileTool:
    """Calls ``function`` of the file at ``path`` in a new sandbox per call."""

    def __init__(self, spec: str, timeout_s: float = 10.0, memory_mb: int = 512, backend: str = "bwrap"):
        ref = code_ref(spec) or CodeRef(spec, "")  # the tool's source: 'path/to/file.py:function'
        self.function, self.source = ref.function, Path(ref.where).read_text()
        self.timeout_s, self.memory_mb, self.backend = timeout_s, memory_mb, backend

    def __call__(self, arguments: dict) -> tuple[str, str | None]:
        marker = f"@@result-{secrets.token_hex(8)}@@"
        request = json.dumps({"function": self.function, "arguments": arguments, "marker": marker})
        result = run_in_sandbox(
            self.source + "\n" + CALL,
            stdin=request,
            timeout_s=self.timeout_s,
            cpu_s=max(1, int(self.timeout_s) + 1),
            memory_mb=self.memory_mb,
            backend=self.backend,
        )
        if result.infra_error:
            return "Error: the tool could not start", "sandbox"
        if result.timed_out:
            return f"Error: timed out after {self.timeout_s:g} s", "timeout"
        lines = [line for line in result.stdout.splitlines() if line.startswith(marker)]
        if not result.ok or not lines:
            errors = [line for line in result.stderr.strip().splitlines() if line.strip()]
            return "Error: " + (errors[-1] if errors else f"exit code {result.exit_code}"), "raised"
        value = safe_json_loads(lines[-1][len(marker) :])
        if isinstance(value, JsonRejected) or not isinstance(value, str):
            return f"Error: the tool's result could not be read ({getattr(value, 'reason', 'not a string')})", "raised"
        return value, None
