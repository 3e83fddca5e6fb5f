"""How one sandbox run is launched, for ``runner.py``: under bubblewrap (``run_bwrap``: the program handed
to bwrap on an fd, the seccomp filter, the memory cgroup where one can be made, a per-run uid when root,
the process budget) or with rlimits only (``run_rlimits``: a scratch folder, removed afterwards even when
the program made it unreadable, ``remove_tree``). Both end in ``process.execute``.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile

from grouprl.rewards.sandbox import seccomp
from grouprl.rewards.sandbox.bwrap import (
    BWRAP_ENV,
    SANDBOX_PATH,
    SHM_BYTES,
    bwrap_command,
    drop_privileges_prefix,
    is_root,
)
from grouprl.rewards.sandbox.cgroup import SandboxCgroup
from grouprl.rewards.sandbox.process import Limits, SandboxResult, execute, launcher_argv
from grouprl.rewards.sandbox.uids import acquire_uid, release_uid

logger = logging.getLogger(__name__)

MAIN_FILE = "main.py"
CGROUP_OVERHEAD_MB = 32  # bwrap, setpriv and the interpreter's own pages

_cgroup_warned = False


def _user_task_count(uid: int) -> int:
    """Tasks (threads included) of real uid ``uid``: what RLIMIT_NPROC compares against."""
    n = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    n += len(os.listdir(f"/proc/{pid}/task"))
            except OSError:
                pass
    return n


def _memory_cgroup(limits: Limits, scratch_mb: int, nproc_budget: int) -> SandboxCgroup | None:
    global _cgroup_warned
    total = (limits.memory_mb + scratch_mb + CGROUP_OVERHEAD_MB) * 1024 * 1024 + SHM_BYTES
    cg = SandboxCgroup.create(total, max_pids=nproc_budget + 4)
    if cg is None and not _cgroup_warned:
        _cgroup_warned = True
        logger.info(
            "sandbox: no memory cgroup available here; memory is limited per process "
            "(RLIMIT_AS) and memfd_create is refused (see docs/security.md)"
        )
    return cg


def run_bwrap(
    code: str, stdin: str, python: str, limits: Limits, scratch_mb: int, expose_grouprl: bool
) -> SandboxResult:
    filt = seccomp.filter_bytes()
    uid = acquire_uid() if is_root() else None
    cg = _memory_cgroup(limits, scratch_mb, limits.max_procs)
    code_file = tempfile.TemporaryFile()
    fds: list[int] = [code_file.fileno()]
    try:
        code_file.write(code.encode("utf-8"))
        code_file.flush()
        code_file.seek(0)
        seccomp_fd = None
        if filt is not None:
            seccomp_fd = _data_fd(filt)
            fds.append(seccomp_fd)
        start_pipe = os.pipe()
        cmd = bwrap_command(
            python,
            scratch_bytes=scratch_mb * 1024 * 1024,
            code_fd=code_file.fileno(),
            code_name=MAIN_FILE,
            seccomp_fd=seccomp_fd,
            expose_grouprl=expose_grouprl,
        )
        if uid is not None:
            cmd += drop_privileges_prefix(uid)
            nproc = limits.max_procs
        else:
            nproc = _user_task_count(os.getuid()) + limits.max_procs
        cmd += launcher_argv(python, start_pipe[1], MAIN_FILE)
        if cg is not None:
            cmd = cg.join_command() + cmd
        return execute(
            cmd,
            env=dict(BWRAP_ENV),
            cwd="/",
            stdin=stdin,
            limits=limits,
            nproc=nproc,
            backend="bwrap",
            start_pipe=start_pipe,
            pass_fds=tuple(fds),
            oom_killed=cg.oom_killed if cg else None,
        )
    finally:
        code_file.close()
        for fd in fds[1:]:
            os.close(fd)
        if cg is not None and not cg.remove():
            logger.warning("sandbox: could not remove cgroup %s", cg.dirs)
        if uid is not None:
            release_uid(uid)


def _data_fd(data: bytes) -> int:
    """A readable fd holding ``data`` (an unlinked temporary file), positioned at 0."""
    fd, path = tempfile.mkstemp(prefix="grouprl-sbx-")
    os.unlink(path)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def remove_tree(path: str) -> None:
    """Remove ``path`` even when the program made parts of it unreadable (``chmod 000``): as a
    normal user ``rmtree`` cannot enter such a directory, so first make every directory ours."""

    def open_up(d: str) -> None:
        try:
            os.chmod(d, stat.S_IRWXU)
            entries = list(os.scandir(d))
        except OSError:
            return
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                open_up(entry.path)

    if os.path.isdir(path) and not os.path.islink(path):
        open_up(path)
    shutil.rmtree(path, ignore_errors=True)


def run_rlimits(code: str, stdin: str, python: str, limits: Limits) -> SandboxResult:
    scratch = tempfile.mkdtemp(prefix="grouprl-sbx-")
    try:
        with open(os.path.join(scratch, MAIN_FILE), "w", encoding="utf-8") as f:
            f.write(code)
        env = {
            "PATH": SANDBOX_PATH,
            "HOME": scratch,
            "TMPDIR": scratch,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONIOENCODING": "utf-8",
        }
        start_pipe = os.pipe()
        cmd = launcher_argv(python, start_pipe[1], MAIN_FILE)
        nproc = limits.max_procs if is_root() else _user_task_count(os.getuid()) + limits.max_procs
        return execute(
            cmd,
            env=env,
            cwd=scratch,
            stdin=stdin,
            limits=limits,
            nproc=nproc,
            backend="rlimits",
            start_pipe=start_pipe,
            pass_fds=(),
        )
    finally:
        remove_tree(scratch)
