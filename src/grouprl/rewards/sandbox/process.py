"""Run one sandbox command under limits and collect what happened (used by ``launchers.py``).

Limits are set by util-linux ``prlimit`` exec'd before the sandbox (``preexec_fn`` is unsafe
in a threaded parent and is only the fallback); output is read incrementally with a cap; a
wall-clock timeout kills the whole process group (and with it the sandbox's pid namespace).

Whether the program itself started is told by a launcher (``LAUNCHER``): the first thing run
by the interpreter inside the sandbox writes one byte to a pipe and closes it before any of the
program's code runs. No byte means the sandbox could not start the program (bwrap failed, the
interpreter is not visible, ``EAGAIN`` on clone...): an infrastructure error, never the
program's failure, and the program cannot fake one (the pipe is closed before it runs).
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

_READ_CHUNK = 65536
LAUNCHER = (
    "import os,sys,runpy;fd=int(sys.argv[1]);os.write(fd,b'1');os.close(fd);"
    "sys.argv=sys.argv[2:];runpy.run_path(sys.argv[0],run_name='__main__')"
)


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
    # Set when the sandbox could not start the program at all: an error, never a score.
    infra_error: str | None = None


@dataclass
class Limits:
    cpu_s: int
    memory_mb: int
    max_procs: int
    max_file_bytes: int
    max_output_bytes: int
    timeout_s: float
    # Open files per process. Also bounds the kernel memory of socket buffers, which RLIMIT_AS does not
    # count (20000 inherited fds let one process hold 1.2 GB in socketpairs under a 256 MB limit).
    max_open_files: int = 256


def launcher_argv(python: str, start_fd: int, main_file: str) -> list[str]:
    return [python, "-I", "-c", LAUNCHER, str(start_fd), main_file]


def prlimit_prefix(limits: Limits, nproc: int) -> list[str] | None:
    prlimit = shutil.which("prlimit")
    if not prlimit:
        return None
    cpu = max(1, int(limits.cpu_s))
    return [
        prlimit,
        f"--cpu={cpu}:{cpu + 1}",
        f"--as={int(limits.memory_mb) * 1024 * 1024}",
        f"--nproc={int(nproc)}",
        f"--fsize={int(limits.max_file_bytes)}",
        "--core=0",
        f"--nofile={int(limits.max_open_files)}",
        "--",
    ]


def _make_preexec(limits: Limits, nproc: int):
    def preexec() -> None:  # runs in the child between fork and exec: keep it simple
        def lim(res: int, v: int, hard: int | None = None) -> None:
            resource.setrlimit(res, (v, v if hard is None else hard))

        cpu = max(1, int(limits.cpu_s))
        # soft < hard: the soft limit delivers SIGXCPU (reported as "cpu"), the hard one SIGKILL.
        lim(resource.RLIMIT_CPU, cpu, cpu + 1)
        lim(resource.RLIMIT_AS, int(limits.memory_mb) * 1024 * 1024)
        lim(resource.RLIMIT_NPROC, int(nproc))
        lim(resource.RLIMIT_FSIZE, int(limits.max_file_bytes))
        lim(resource.RLIMIT_CORE, 0)
        lim(resource.RLIMIT_NOFILE, int(limits.max_open_files))

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
    assert proc.stdin is not None  # the program is started with stdin=PIPE
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


def _kill_reason(exit_code: int | None, backend: str, stderr: str, oom: bool) -> str | None:
    sig = _signal_of(exit_code, backend)
    if oom:
        return "memory"
    if sig == signal.SIGXCPU:
        return "cpu"
    if sig == signal.SIGXFSZ:
        return "file_size"
    if sig is not None:
        return f"signal:{signal.Signals(sig).name}" if sig in signal.valid_signals() else f"signal:{sig}"
    if exit_code != 0 and "MemoryError" in stderr:
        return "memory"
    return None


def execute(
    cmd: list[str],
    *,
    env: dict[str, str],
    cwd: str | None,
    stdin: str,
    limits: Limits,
    nproc: int,
    backend: str,
    start_pipe: tuple[int, int],
    pass_fds: tuple[int, ...],
    oom_killed=None,
) -> SandboxResult:
    """Run ``cmd`` (which ends in ``launcher_argv``) under ``limits``. ``start_pipe`` is the
    launcher's pipe (both ends are closed here); ``pass_fds`` are inherited by the command."""
    start = time.monotonic()
    start_r, start_w = start_pipe
    killed: list[str] = []  # why we killed it ("output", "timeout"); the first reason is the one reported
    proc = _spawn(cmd, env, cwd, limits, nproc, (*pass_fds, start_w))
    os.close(start_w)

    def overflow() -> None:
        if not killed:
            killed.append("output")
        _kill_group(proc)

    readers = [
        _Reader(proc.stdout, limits.max_output_bytes, overflow),
        _Reader(proc.stderr, limits.max_output_bytes, overflow),
    ]
    for r in readers:
        r.start()
    threading.Thread(target=_feed_stdin, args=(proc, stdin.encode("utf-8", "replace")), daemon=True).start()
    timed_out = _wait(proc, limits.timeout_s, killed)
    _close_pipes(proc, readers)
    started = _launcher_started(start_r)
    duration = time.monotonic() - start

    exit_code = proc.returncode
    stdout = readers[0].buf.decode("utf-8", "replace")
    stderr = readers[1].buf.decode("utf-8", "replace")
    infra = None if started else _not_started(backend, exit_code, timed_out, stderr)
    reason = killed[0] if killed else _kill_reason(exit_code, backend, stderr, bool(oom_killed and oom_killed()))
    return SandboxResult(
        ok=exit_code == 0 and not killed and not timed_out and infra is None,
        exit_code=exit_code,
        stdout=stdout,
        stderr=stderr,
        truncated=readers[0].overflow or readers[1].overflow,
        timed_out=timed_out,
        killed_reason=reason,
        backend=backend,
        duration_s=duration,
        infra_error=infra,
    )


def _spawn(
    cmd: list[str], env: dict[str, str], cwd: str | None, limits: Limits, nproc: int, pass_fds: tuple[int, ...]
) -> subprocess.Popen:
    """``cmd`` started in its own session under ``limits``: by ``prlimit`` when there is one, else by a
    ``preexec_fn`` (unsafe in a threaded parent, so only the fallback)."""
    prefix = prlimit_prefix(limits, nproc)
    preexec = None if prefix else _make_preexec(limits, nproc)
    return subprocess.Popen(
        prefix + cmd if prefix else cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
        close_fds=True,
        pass_fds=pass_fds,
        preexec_fn=preexec,
    )


def _wait(proc: subprocess.Popen, timeout_s: float, killed: list[str]) -> bool:
    """Wait for the program until the wall-clock timeout, then kill its whole group; whether it timed out."""
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
    return timed_out


def _close_pipes(proc: subprocess.Popen, readers: list[_Reader]) -> None:
    for r in readers:
        r.join(timeout=2.0)
    for s in (proc.stdout, proc.stderr):
        try:
            if s is not None:
                s.close()
        except OSError:
            pass


def _launcher_started(start_r: int) -> bool:
    """Whether the launcher wrote its byte (the program started); closes the pipe's read end."""
    os.set_blocking(start_r, False)
    try:
        return os.read(start_r, 1) == b"1"
    except BlockingIOError:
        return False
    finally:
        os.close(start_r)


def _not_started(backend: str, exit_code: int | None, timed_out: bool, stderr: str) -> str:
    """The infrastructure error of a run whose program never started, with the sandbox's last line."""
    last = [ln for ln in stderr.strip().splitlines() if ln.strip()][-1:] or ["no message"]
    return (
        f"sandbox ({backend}) could not start the program (exit {exit_code}"
        f"{', timed out' if timed_out else ''}): {last[0][:300]}"
    )
