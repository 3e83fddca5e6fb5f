"""The bubblewrap command line for the reward sandbox: what is mounted, hidden and dropped.

Process control (limits, timeouts, output caps, the fallback) lives in ``sandbox.py``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

# Directories hidden behind empty tmpfs mounts inside the sandbox (if they exist).
HIDDEN_DIRS = ("/root", "/home", "/tmp", "/var/tmp", "/run")
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
SCRATCH = "/tmp"  # mount point of the scratch dir inside the sandbox (also the cwd)
# Unprivileged uids used when we are root: one per concurrent run, so runs do not share
# (and cannot exhaust each other's) RLIMIT_NPROC budget.
UID_BASE = 2_000_000
UID_SLOTS = 4096


def is_root() -> bool:
    return os.geteuid() == 0


def under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def python_dirs(python: str) -> list[str]:
    """Directories the interpreter needs that may sit under a hidden directory."""
    cands: set[str] = set()
    for p in {python, os.path.realpath(python)}:
        cands.add(os.path.dirname(os.path.dirname(os.path.abspath(p))))
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        cands.update({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix})
        # grouprl itself (an editable install points outside site-packages), for sandboxed user rewards
        cands.add(str(Path(__file__).resolve().parents[2]))
    out = []
    for c in sorted(cands):
        c = os.path.abspath(c)
        if os.path.isdir(c) and any(under(c, h) and c != h for h in HIDDEN_DIRS):
            out.append(c)
    # Drop entries already covered by another bind.
    return [c for c in out if not any(o != c and under(c, o) for o in out)]


def bwrap_command(scratch: str | None, python: str) -> list[str]:
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    args = [
        bwrap,
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--ro-bind", "/", "/",
    ]
    for d in HIDDEN_DIRS:
        if os.path.isdir(d) and not os.path.islink(d):
            args += ["--tmpfs", d]
    for d in python_dirs(python):
        # bwrap creates missing parents 0700; make them traversable for the unprivileged uid.
        hidden = next(h for h in HIDDEN_DIRS if under(d, h))
        parts = Path(os.path.relpath(d, hidden)).parts
        for i in range(1, len(parts)):
            args += ["--perms", "0755", "--dir", os.path.join(hidden, *parts[:i])]
        args += ["--ro-bind", d, d]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if scratch is not None:
        args += ["--bind", scratch, SCRATCH, "--chdir", SCRATCH]
    args += [
        "--clearenv",
        "--setenv", "PATH", SANDBOX_PATH,
        "--setenv", "HOME", SCRATCH,
        "--setenv", "TMPDIR", SCRATCH,
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--setenv", "PYTHONIOENCODING", "utf-8",
    ]
    if is_root():
        # Privileged bwrap: keep only what is needed to drop to the unprivileged uid.
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534"]
    return args


def drop_privileges_prefix(uid: int) -> list[str]:
    """Command prefix run inside the sandbox (as root) that switches to ``uid``."""
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--"]
    shim = (
        "import os,sys;os.setgroups([]);os.setgid(int(sys.argv[1]));os.setuid(int(sys.argv[1]));"
        "os.execv(sys.argv[2],sys.argv[2:])"
    )
    return [sys.executable, "-I", "-S", "-c", shim, str(uid)]
