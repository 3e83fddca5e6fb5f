"""The bubblewrap command line for the reward sandbox: what the program sees and what it cannot do.

The sandbox is built from an empty root, not from the host's ``/``: it holds only

* the system's programs and libraries, read-only (``/usr`` and the ``/bin``, ``/lib``...
  links or directories, plus a short list of ``/etc`` files the dynamic loader and libc read);
* the interpreter's prefixes (the venv and its base Python, wherever they live, even under
  ``/tmp`` or ``/root``), read-only;
* a fresh ``/proc`` (of the sandbox's own pid namespace) and a minimal read-only ``/dev``;
* a size-capped tmpfs on ``/tmp`` that is the working directory and ``HOME``, and a small one on
  ``/dev/shm``; both vanish with the sandbox's mount namespace, so nothing is left on the host.

So the project, the datasets, caches (``HF_HOME``), other runs' scratch dirs, ``/run`` and the
host's unix sockets are simply not there. Process control (limits, timeouts, the memory cgroup,
output caps, the fallback) lives in ``runner.py``, ``launchers.py`` and ``process.py``; the seccomp
filter in ``seccomp.py``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
SCRATCH = "/tmp"  # the size-capped tmpfs inside the sandbox: cwd, HOME and TMPDIR
# Top-level system entries shown read-only (a symlink, as on merged-/usr systems, is re-created).
SYSTEM_ENTRIES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What of /etc the loader, libc and Python read; nothing else of /etc is shown.
ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "passwd",
    "group",
    "alternatives",
    "mime.types",
)
SHM_BYTES = 8 * 1024 * 1024
# Where the grouprl package is shown inside the sandbox (for sandboxed user rewards).
GROUPRL_MOUNT = "/opt/grouprl-lib"
# The environment bwrap itself starts with. bwrap is pid 1 of the sandbox's pid namespace, so its
# /proc/1/environ is readable from inside when we are not root: it must hold nothing of ours.
BWRAP_ENV = {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8"}
# Unprivileged uids used when we are root: one per concurrent run, so runs do not share
# (and cannot exhaust each other's) RLIMIT_NPROC budget.
UID_BASE = 2_000_000
UID_SLOTS = 4096


def is_root() -> bool:
    return os.geteuid() == 0


def under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


@functools.lru_cache(maxsize=16)
def interpreter_prefixes(python: str) -> tuple[str, ...]:
    """The directories ``python`` needs (its venv and base prefixes, the real file's prefix).

    Asked from the interpreter itself (it is the trusted interpreter the config names), so a
    venv anywhere (``/tmp/venv``) with a base Python anywhere (``~/.pyenv``) works.
    """
    cands = {os.path.dirname(os.path.dirname(os.path.abspath(p))) for p in (python, os.path.realpath(python))}
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        cands.update({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix})
    else:
        try:
            out = subprocess.run(
                [
                    python,
                    "-I",
                    "-c",
                    "import sys;print(sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, sep='\\n')",
                ],
                capture_output=True,
                text=True,
                timeout=30,
                env=BWRAP_ENV,
            ).stdout
            cands.update(line for line in out.splitlines() if line.startswith("/"))
        except (OSError, subprocess.SubprocessError):
            pass  # the probe then fails loudly with the interpreter's own error
    dirs = sorted(os.path.abspath(c) for c in cands if c and os.path.isdir(c))
    dirs = [d for d in dirs if not any(under(d, s) for s in SYSTEM_ENTRIES if os.path.isdir(s))]
    dirs = [d for d in dirs if d != "/"]
    return tuple(d for d in dirs if not any(o != d and under(d, o) for o in dirs))


def grouprl_package_dir() -> str:
    return str(Path(__file__).resolve().parents[2])  # src/grouprl (this file: grouprl/rewards/sandbox/)


def _system_args() -> list[str]:
    args: list[str] = []
    for entry in SYSTEM_ENTRIES:
        if os.path.islink(entry):
            args += ["--symlink", os.readlink(entry), entry]
        elif os.path.isdir(entry):
            args += ["--ro-bind", entry, entry]
    args += ["--perms", "0755", "--dir", "/etc"]
    for name in ETC_ENTRIES:
        path = os.path.join("/etc", name)
        if os.path.lexists(path):
            args += ["--ro-bind-try", path, path]
    return args


def _bind_ro_with_parents(src: str, dest: str, made: set[str]) -> list[str]:
    """``--ro-bind src dest``, first creating dest's missing parents 0755 (bwrap would make them
    0700, which the unprivileged uid could not traverse)."""
    args: list[str] = []
    parts = Path(dest).parts
    for i in range(2, len(parts)):
        parent = os.path.join(*parts[:i])
        if parent not in made and parent != SCRATCH:
            made.add(parent)
            args += ["--perms", "0755", "--dir", parent]
    return args + ["--ro-bind", src, dest]


def bwrap_command(
    python: str,
    *,
    scratch_bytes: int,
    code_fd: int,
    code_name: str,
    seccomp_fd: int | None = None,
    expose_grouprl: bool = False,
) -> list[str]:
    """The bwrap argv (up to, not including, the command run inside).

    ``code_fd`` is read by bwrap into ``/tmp/<code_name>`` (the program never exists as a host
    file); ``seccomp_fd`` holds a compiled filter (``seccomp.py``) or None.
    """
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
    ]
    args += _system_args()
    args += _scratch_args(scratch_bytes)
    made: set[str] = set()
    for prefix in interpreter_prefixes(python):
        args += _bind_ro_with_parents(prefix, prefix, made)
    if expose_grouprl:
        args += _bind_ro_with_parents(grouprl_package_dir(), f"{GROUPRL_MOUNT}/grouprl", made)
    args += ["--perms", "0644", "--file", str(code_fd), f"{SCRATCH}/{code_name}"]
    args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", SCRATCH]
    args += _env_args()
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    return args + _identity_args()


def _scratch_args(scratch_bytes: int) -> list[str]:
    """A fresh ``/proc`` and ``/dev``, and the two size-capped tmpfs: ``/dev/shm`` and the scratch ``/tmp``."""
    return [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(SHM_BYTES),
        "--tmpfs",
        "/dev/shm",
        "--perms",
        "1777",
        "--size",
        str(int(scratch_bytes)),
        "--tmpfs",
        SCRATCH,
    ]


def _env_args() -> list[str]:
    """The program's environment: cleared, then only the path, the scratch as home, and Python's I/O settings."""
    return [
        "--clearenv",
        "--setenv",
        "PATH",
        SANDBOX_PATH,
        "--setenv",
        "HOME",
        SCRATCH,
        "--setenv",
        "TMPDIR",
        SCRATCH,
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "PYTHONDONTWRITEBYTECODE",
        "1",
        "--setenv",
        "PYTHONIOENCODING",
        "utf-8",
    ]


def _identity_args() -> list[str]:
    """Who the program runs as: as root, the capabilities to drop to the per-run uid (``setpriv`` inside);
    else a user namespace as nobody, with no further user namespaces."""
    if is_root():
        # Privileged bwrap: keep only what is needed to drop to the unprivileged uid. There is no
        # user namespace to disable here; the seccomp filter refuses CLONE_NEWUSER instead.
        return ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return ["--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534"]


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
