"""Run untrusted Python code in a sandbox (bubblewrap + rlimits).

Used by code-execution rewards: model-written programs are executed with

* ``bwrap`` namespaces: no network (``--unshare-net``), private pid/ipc/uts/cgroup
  namespaces, a read-only view of the system with ``/root``, ``/home``, ``/tmp``,
  ``/var/tmp`` and ``/run`` hidden behind empty tmpfs mounts, a fresh writable scratch
  directory mounted as both the working directory and ``/tmp`` (deleted afterwards),
  a fresh ``/proc`` and ``/dev``, and a cleared environment;
* rlimits: CPU seconds, address space, number of processes, file size, no core dumps;
* an unprivileged uid: ``RLIMIT_NPROC`` is ignored for real uid 0, so when we are root
  the program is started as a per-run unprivileged uid (``setpriv`` inside the sandbox),
  which makes the process limit bite (fork bombs are contained). When we are not root,
  ``--unshare-user`` gives the sandbox its own user namespace, and the process limit is
  counted inside it;
* a wall-clock timeout that kills the whole process group (and with it the sandbox's
  pid namespace), and output caps enforced while reading, so a program printing
  gigabytes costs at most ``max_output_bytes`` of memory per stream.

If bubblewrap is missing or cannot start (e.g. user namespaces disabled), the code runs
with rlimits only. That is much weaker (no network or filesystem isolation), so it is
never silent: a one-time warning is emitted, every such run increments
``SANDBOX_FALLBACKS`` and reports ``backend == "rlimits"``.
"""

from __future__ import annotations

import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable

from grouprl.rewards.bwrap import (SANDBOX_PATH, UID_BASE, UID_SLOTS, bwrap_command,
                                   drop_privileges_prefix, is_root)

__all__ = [
    "SandboxResult",
    "SandboxFallbackWarning",
    "SANDBOX_FALLBACKS",
    "fallback_count",
    "run_in_sandbox",
    "run_many",
    "bwrap_available",
]

logger = logging.getLogger(__name__)

#: Number of runs that went through the weak rlimits-only fallback (a metric).
SANDBOX_FALLBACKS = 0

MAIN_FILE = "main.py"
_READ_CHUNK = 65536
_READ_CHUNK = 65536


class SandboxFallbackWarning(RuntimeWarning):
    """Untrusted code ran with rlimits only (no bubblewrap isolation)."""


@dataclass
class SandboxResult:
    ok: bool
    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool
    timed_out: bool
    killed_reason: str | None
    backend: str
    duration_s: float


# --------------------------------------------------------------------------- helpers

_lock = threading.Lock()
_probe_result: tuple[bool, str] | None = None
_warned = False
_free_slots = list(range(UID_SLOTS - 1, -1, -1))


def _acquire_uid() -> int:
    with _lock:
        if not _free_slots:
            raise RuntimeError("too many concurrent sandbox runs")
        return UID_BASE + _free_slots.pop()


def _release_uid(uid: int) -> None:
    with _lock:
        _free_slots.append(uid - UID_BASE)


def _probe() -> tuple[bool, str]:
    """One-time check that bubblewrap exists and can start a sandbox here."""
    global _probe_result
    with _lock:
        if _probe_result is not None:
            return _probe_result
    if shutil.which("bwrap") is None:
        res = (False, "bwrap not found on PATH (install bubblewrap: .ci/install-system-deps)")
    else:
        true = shutil.which("true") or "/bin/true"
        cmd = bwrap_command(None, sys.executable)
        if is_root():
            cmd += drop_privileges_prefix(UID_BASE + UID_SLOTS)
        cmd += [true]
        try:
            p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
            if p.returncode == 0:
                res = (True, "")
            else:
                res = (False, f"bwrap probe failed (rc={p.returncode}): {p.stderr.decode(errors='replace').strip()}")
        except (OSError, subprocess.SubprocessError) as e:
            res = (False, f"bwrap probe failed: {e!r}")
    with _lock:
        _probe_result = res
    return res


def bwrap_available() -> tuple[bool, str]:
    """(usable, reason): whether the bubblewrap backend works on this machine."""
    return _probe()


def fallback_count() -> int:
    """Runs so far (in this process) that had only the rlimits fallback, not bubblewrap isolation."""
    return SANDBOX_FALLBACKS


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


def _make_preexec(cpu_s: int, memory_mb: int, max_procs: int, max_file_bytes: int):
    def preexec() -> None:  # runs in the child between fork and exec: keep it simple
        def lim(res: int, v: int, hard: int | None = None) -> None:
            resource.setrlimit(res, (v, v if hard is None else hard))

        # soft < hard: the soft limit delivers SIGXCPU (reported as "cpu"), the hard one SIGKILL.
        lim(resource.RLIMIT_CPU, max(1, int(cpu_s)), max(1, int(cpu_s)) + 1)
        lim(resource.RLIMIT_AS, int(memory_mb) * 1024 * 1024)
        lim(resource.RLIMIT_NPROC, int(max_procs))
        lim(resource.RLIMIT_FSIZE, int(max_file_bytes))
        lim(resource.RLIMIT_CORE, 0)

    return preexec


class _Reader(threading.Thread):
    """Reads one pipe incrementally, keeping at most ``cap`` bytes."""

    def __init__(self, stream, cap: int, on_overflow) -> None:
        super().__init__(daemon=True)
        self.stream, self.cap, self.on_overflow = stream, cap, on_overflow
        self.buf = bytearray()
        self.overflow = False

    def run(self) -> None:
        fd = self.stream.fileno()
        try:
            while True:
                chunk = os.read(fd, _READ_CHUNK)
                if not chunk:
                    break
                room = self.cap - len(self.buf)
                if len(chunk) > room:
                    self.buf += chunk[: max(room, 0)]
                    if not self.overflow:
                        self.overflow = True
                        self.on_overflow()
                    # keep draining (discarding) so the writer never blocks on a full pipe
                else:
                    self.buf += chunk
        except OSError:
            pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass


def _feed_stdin(proc: subprocess.Popen, data: bytes) -> None:
    try:
        if data:
            proc.stdin.write(data)
        proc.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass


def _signal_of(exit_code: int | None, backend: str) -> int | None:
    if exit_code is None:
        return None
    if exit_code < 0:
        return -exit_code
    if backend == "bwrap" and exit_code > 128:  # bwrap reports a signalled child as 128+sig
        return exit_code - 128
    return None


# --------------------------------------------------------------------------- public API


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
    python: str = sys.executable,
    backend: str = "auto",
) -> SandboxResult:
    """Run Python ``code`` in a fresh sandbox and return what happened.

    ``backend``: "auto" (bubblewrap if usable, else the loud rlimits fallback),
    "bwrap" (fail if unusable) or "rlimits" (force the fallback, e.g. for tests).
    """
    if backend not in ("auto", "bwrap", "rlimits"):
        raise ValueError(f"unknown sandbox backend {backend!r}")
    use_bwrap = False
    if backend != "rlimits":
        usable, reason = _probe()
        if usable:
            use_bwrap = True
        elif backend == "bwrap":
            raise RuntimeError(f"bubblewrap sandbox unavailable: {reason}")
    else:
        reason = "backend='rlimits' requested"
    if not use_bwrap:
        _note_fallback(reason)
    be = "bwrap" if use_bwrap else "rlimits"

    scratch = tempfile.mkdtemp(prefix="grouprl-sbx-")
    uid = _acquire_uid() if is_root() and use_bwrap else None
    try:
        main_py = os.path.join(scratch, MAIN_FILE)
        with open(main_py, "w", encoding="utf-8") as f:
            f.write(code)
        if uid is not None:
            os.chown(scratch, uid, uid)
            os.chown(main_py, uid, uid)
            os.chmod(scratch, 0o711)  # bwrap (root, caps dropped) must be able to chdir in
        if use_bwrap:
            cmd = bwrap_command(scratch, python)
            if uid is not None:
                cmd += drop_privileges_prefix(uid)
            cmd += [python, "-I", MAIN_FILE]
            env = None
            cwd = None
        else:
            cmd = [python, "-I", MAIN_FILE]
            env = {"PATH": SANDBOX_PATH, "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8",
                   "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}
            cwd = scratch
        return _execute(cmd, env, cwd, stdin, timeout_s, cpu_s, memory_mb, max_procs,
                        max_output_bytes, max_file_mb * 1024 * 1024, be)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if uid is not None:
            _release_uid(uid)


def _execute(cmd, env, cwd, stdin, timeout_s, cpu_s, memory_mb, max_procs, max_output_bytes,
             max_file_bytes, be) -> SandboxResult:
    start = time.monotonic()
    killed: list[str] = []
    prlimit = shutil.which("prlimit")
    preexec = None
    if prlimit:
        # Set the limits with util-linux prlimit (exec'd before bwrap/python): preexec_fn is
        # not safe in a multithreaded parent (run_many), so it is only the fallback.
        cpu = max(1, int(cpu_s))
        cmd = [
            prlimit,
            f"--cpu={cpu}:{cpu + 1}",
            f"--as={int(memory_mb) * 1024 * 1024}",
            f"--nproc={int(max_procs)}",
            f"--fsize={int(max_file_bytes)}",
            "--core=0",
            "--",
            *cmd,
        ]
    else:
        preexec = _make_preexec(cpu_s, memory_mb, max_procs, max_file_bytes)
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
        close_fds=True,
        preexec_fn=preexec,
    )

    def overflow() -> None:
        if not killed:
            killed.append("output")
        _kill_group(proc)

    out_r = _Reader(proc.stdout, max_output_bytes, overflow)
    err_r = _Reader(proc.stderr, max_output_bytes, overflow)
    out_r.start()
    err_r.start()
    feeder = threading.Thread(target=_feed_stdin, args=(proc, stdin.encode("utf-8", "replace")), daemon=True)
    feeder.start()

    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        if not killed:
            killed.append("timeout")
        _kill_group(proc)
        proc.wait()
    _kill_group(proc)  # reap any stragglers left in the group (rlimits backend)
    for t in (out_r, err_r):
        t.join(timeout=2.0)
    for s in (proc.stdout, proc.stderr):
        try:
            s.close()
        except OSError:
            pass
    duration = time.monotonic() - start

    exit_code = proc.returncode
    stdout = out_r.buf.decode("utf-8", "replace")
    stderr = err_r.buf.decode("utf-8", "replace")
    reason = killed[0] if killed else None
    if reason is None:
        sig = _signal_of(exit_code, be)
        if sig == signal.SIGXCPU:
            reason = "cpu"
        elif sig == signal.SIGXFSZ:
            reason = "file_size"
        elif sig is not None:
            reason = f"signal:{signal.Signals(sig).name}" if sig in signal.valid_signals() else f"signal:{sig}"
    if reason is None and exit_code != 0 and "MemoryError" in stderr:
        reason = "memory"
    truncated = out_r.overflow or err_r.overflow
    ok = exit_code == 0 and not killed and not timed_out
    return SandboxResult(
        ok=ok,
        exit_code=exit_code,
        stdout=stdout,
        stderr=stderr,
        truncated=truncated,
        timed_out=timed_out,
        killed_reason=reason,
        backend=be,
        duration_s=duration,
    )


def run_many(codes: Iterable[str], workers: int = 4, **kw) -> list[SandboxResult]:
    """Run many programs concurrently (each in its own sandbox); results keep input order."""
    codes = list(codes)
    if not codes:
        return []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(lambda c: run_in_sandbox(c, **kw), codes))
