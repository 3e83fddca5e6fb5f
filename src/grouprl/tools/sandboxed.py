"""A user's tool from a file, called inside the bubblewrap sandbox (``tool_sandbox: true``).

Each call runs the file's source in a fresh sandbox (``rewards/sandbox.run_in_sandbox``) and calls
the function there with the JSON arguments; the result is read back from a line that starts with a
per-call random marker, so whatever else the tool prints cannot pose as its result.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from grouprl.rewards.sandbox.runner import run_in_sandbox
from grouprl.user_code import CodeRef, code_ref

CALL = r'''
import json as _json, sys as _sys
_request = _json.loads(_sys.stdin.read())
_result = globals()[_request["function"]](**_request["arguments"])
_sys.stdout.write("\n" + _request["marker"] + _json.dumps(_result if isinstance(_result, str) else repr(_result)) + "\n")
'''


class SandboxedFileTool:
    """Calls ``function`` of the file at ``path`` in a new sandbox per call."""

    def __init__(self, spec: str, timeout_s: float = 10.0, memory_mb: int = 512, backend: str = "auto"):
        ref = code_ref(spec) or CodeRef(spec, "")  # the tool's source: 'path/to/file.py:function'
        self.function, self.source = ref.function, Path(ref.where).read_text()
        self.timeout_s, self.memory_mb, self.backend = timeout_s, memory_mb, backend

    def __call__(self, arguments: dict) -> tuple[str, str | None]:
        marker = f"@@result-{secrets.token_hex(8)}@@"
        request = json.dumps({"function": self.function, "arguments": arguments, "marker": marker})
        result = run_in_sandbox(self.source + "\n" + CALL, stdin=request, timeout_s=self.timeout_s,
                                cpu_s=max(1, int(self.timeout_s) + 1), memory_mb=self.memory_mb, backend=self.backend)
        if result.infra_error:
            return "Error: the tool could not start", "sandbox"
        if result.timed_out:
            return f"Error: timed out after {self.timeout_s:g} s", "timeout"
        lines = [line for line in result.stdout.splitlines() if line.startswith(marker)]
        if not result.ok or not lines:
            errors = [line for line in result.stderr.strip().splitlines() if line.strip()]
            return "Error: " + (errors[-1] if errors else f"exit code {result.exit_code}"), "raised"
        return json.loads(lines[-1][len(marker):]), None
