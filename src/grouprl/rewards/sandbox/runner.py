"""Run untrusted Python code in a sandbox (bubblewrap + seccomp + cgroup + rlimits).

Used by code-execution rewards and sandboxed user reward files. Each run gets

* a bubblewrap sandbox built from an empty root (``bwrap.py``): the system's libraries and the
  interpreter's prefixes read-only, a size-capped tmpfs as ``/tmp`` (the cwd, removed with the
  sandbox), no network, private pid/ipc/uts namespaces, a cleared environment, and bwrap itself
  started with a scrubbed environment (it is pid 1 inside: its ``/proc/1/environ`` is readable);
* a seccomp filter (``seccomp.py``): no ``memfd_create``, no new user namespaces, no io_uring/bpf;
* a memory cgroup where this machine lets us make one (``cgroup.py``): all memory of all the
  run's processes, tmpfs and kernel objects included;
* rlimits: CPU seconds, address space, processes, file size, no core dumps;
* an unprivileged uid: as root, a per-run uid unique on the machine (``uids.py``; ``setpriv`` inside
  the sandbox), so the process limit bites; not root, a user namespace, and the process limit is our uid's current task count
  plus the budget (the limit counts every task of the real uid, the trainer's threads included);
* a wall-clock timeout that kills the whole process group, and capped output.

A run the sandbox could not start (no launcher byte, see ``sandbox/process.py``) is an infrastructure
error: ``SandboxResult.infra_error`` is set, ``SANDBOX_INFRA_ERRORS`` counts it, it is logged as
an error, and callers turn it into a reward error (never a score). The start-up probe runs the
real layout and limits with the interpreter that will be used.

If bubblewrap is missing or the probe fails, ``backend="auto"`` runs with rlimits only. That is
much weaker (no network or filesystem isolation), so it is never silent: a one-time warning is
emitted, every such run increments ``SANDBOX_FALLBACKS`` and reports ``backend == "rlimits"``.
"""

from __future__ import annotations

import logging
import shutil
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

from grouprl.rewards.sandbox.launchers import run_bwrap, run_rlimits
from grouprl.rewards.sandbox.process import Limits, SandboxResult

__all__ = [
    "SandboxResult",
    "SandboxFallbackWarning",
    "SANDBOX_FALLBACKS",
    "SANDBOX_INFRA_ERRORS",
    "fallback_count",
    "infra_error_count",
    "run_in_sandbox",
    "run_many",
    "bwrap_available",
]

logger = logging.getLogger(__name__)

#: Number of runs that went through the weak rlimits-only fallback (a metric).
SANDBOX_FALLBACKS = 0
#: Number of runs the sandbox could not start (infrastructure errors; a metric).
SANDBOX_INFRA_ERRORS = 0


class SandboxFallbackWarning(RuntimeWarning):
    """Untrusted code ran with rlimits only (no bubblewrap isolation)."""


_lock = threading.Lock()
_probes: dict[str, tuple[bool, str]] = {}
_warned = False


def _probe(python: str) -> tuple[bool, str]:
    """Once per interpreter: can a real sandbox (same layout, limits and uid) run a program?"""
    with _lock:
        if python in _probes:
            return _probes[python]
    if shutil.which("bwrap") is None:
        res = (False, "bwrap not found on PATH (install bubblewrap: .ci/install-system-deps)")
    else:
        try:
            r = run_bwrap(
                "print(6 * 7)",
                "",
                python,
                Limits(
                    cpu_s=10,
                    memory_mb=512,
                    max_procs=64,
                    max_file_bytes=1 << 20,
                    max_output_bytes=1 << 16,
                    timeout_s=30,
                ),
                scratch_mb=8,
                expose_grouprl=False,
            )
            if r.ok and r.stdout == "42\n":
                res = (True, "")
            else:
                why = r.infra_error or f"exit {r.exit_code}: {(r.stderr.strip().splitlines() or [''])[-1]}"
                res = (False, f"bwrap probe failed ({why})")
        except (OSError, RuntimeError) as err:
            res = (False, f"bwrap probe failed: {err!r}")
    with _lock:
        _probes[python] = res
    return res


def bwrap_available(python: str = sys.executable) -> tuple[bool, str]:
    """(usable, reason): whether the bubblewrap backend works here with ``python``."""
    return _probe(python)


def fallback_count() -> int:
    """Runs so far (in this process) that had only the rlimits fallback, not bubblewrap isolation."""
    return SANDBOX_FALLBACKS


def infra_error_count() -> int:
    """Runs so far (in this process) that the sandbox could not start (infrastructure errors)."""
    return SANDBOX_INFRA_ERRORS


def _note_fallback(reason: str) -> None:
    global SANDBOX_FALLBACKS, _warned
    with _lock:
        SANDBOX_FALLBACKS += 1
        first = not _warned
        _warned = True
    if first:
        msg = (
            "SANDBOX DEGRADED: running untrusted code with rlimits only -- NO network or "
            f"filesystem isolation ({reason}). Install bubblewrap (.ci/install-system-deps)."
        )
        logger.warning(msg)
        warnings.warn(msg, SandboxFallbackWarning, stacklevel=3)


def _note_infra_error(result: SandboxResult) -> SandboxResult:
    global SANDBOX_INFRA_ERRORS
    if result.infra_error:
        with _lock:
            SANDBOX_INFRA_ERRORS += 1
        logger.error("SANDBOX INFRASTRUCTURE ERROR (not scored): %s", result.infra_error)
    return result


def run_in_sandbox(
    code: str,
    *,
    stdin: str = "",
    timeout_s: float = 5.0,
    cpu_s: int = 5,
    memory_mb: int = 512,
    max_procs: int = 64,
    max_output_bytes: int = 1_000_000,
    max_file_mb: int = 64,
    scratch_mb: int = 64,
    python: str = sys.executable,
    backend: str = "auto",
    expose_grouprl: bool = False,
) -> SandboxResult:
    """Run Python ``code`` in a fresh sandbox and return what happened.

    ``backend``: "auto" (bubblewrap if usable, else the loud rlimits fallback),
    "bwrap" (fail if unusable) or "rlimits" (force the fallback, e.g. for tests).
    ``scratch_mb``: size of the ``/tmp`` tmpfs (cwd). ``expose_grouprl``: show the grouprl
    package read-only at ``bwrap.GROUPRL_MOUNT`` (sandboxed user rewards import its records).
    A result with ``infra_error`` set means the program never ran: report it, never score it.
    """
    if backend not in ("auto", "bwrap", "rlimits"):
        raise ValueError(f"unknown sandbox backend {backend!r}")
    limits = Limits(
        cpu_s=cpu_s,
        memory_mb=memory_mb,
        max_procs=max_procs,
        max_file_bytes=max_file_mb * 1024 * 1024,
        max_output_bytes=max_output_bytes,
        timeout_s=timeout_s,
    )
    reason = "backend='rlimits' requested"
    if backend != "rlimits":
        usable, reason = _probe(python)
        if usable:
            return _note_infra_error(run_bwrap(code, stdin, python, limits, scratch_mb, expose_grouprl))
        if backend == "bwrap":
            raise RuntimeError(f"bubblewrap sandbox unavailable: {reason}")
    _note_fallback(reason)
    return _note_infra_error(run_rlimits(code, stdin, python, limits))


def run_many(codes: Iterable[str], workers: int = 4, stdins: Iterable[str] | None = None, **kw) -> list[SandboxResult]:
    """Run many programs concurrently (each in its own sandbox, ``stdins[i]`` on program i's stdin);
    results keep input order."""
    codes = list(codes)
    inputs = list(stdins) if stdins is not None else [kw.pop("stdin", "")] * len(codes)
    if not codes:
        return []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(lambda c, i: run_in_sandbox(c, stdin=i, **kw), codes, inputs))
