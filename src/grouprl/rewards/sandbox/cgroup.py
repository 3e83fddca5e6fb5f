"""A memory (and pids) cgroup per sandbox run, where this machine lets us make one.

``RLIMIT_AS`` counts one process's address space only: not tmpfs pages, pipe buffers, kernel
objects (an inode flood), or memory spread over many processes. A memory cgroup counts all of
them for every process of the run. We make one below our own cgroup:

* cgroup v2 (``/sys/fs/cgroup/cgroup.controllers``): needs ``memory`` enabled for our subtree
  (a delegated subtree, e.g. systemd ``Delegate=yes``, or root in a container);
* cgroup v1: ``/sys/fs/cgroup/memory/<our path>`` must be writable (root, usually).

When neither works, ``SandboxCgroup.create`` returns None and the sandbox relies on its other
limits (``docs/security.md`` says which hold where). A process joins by writing its pid to
its ``procs_files`` (``cgroup.procs``) before it execs the sandbox (see ``join_command``).
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()


def _own_path(controller: str | None) -> str | None:
    """Our cgroup path for a v1 controller, or the v2 path (controller None)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if (controller is None and names == "") or (controller and controller in names.split(",")):
            return path
    return None


def _write(path: Path, value: str) -> None:
    path.write_text(value)


class SandboxCgroup:
    """One run's cgroup(s): memory limit (no swap), optional pids limit; removed by ``remove``."""

    def __init__(self, dirs: list[Path], procs_files: list[Path], oom_file: Path, version: int):
        self.dirs, self.procs_files, self.oom_file, self.version = dirs, procs_files, oom_file, version

    @classmethod
    def create(cls, memory_bytes: int, max_pids: int | None = None) -> "SandboxCgroup | None":
        name = f"grouprl-sbx-{os.getpid()}-{next(_counter)}"
        for make in (cls._create_v2, cls._create_v1):
            try:
                made = make(name, memory_bytes, max_pids)
            except OSError:
                made = None
            if made is not None:
                return made
        return None

    @classmethod
    def _create_v2(cls, name: str, memory_bytes: int, max_pids: int | None) -> "SandboxCgroup | None":
        own = _own_path(None)
        if own is None or not (ROOT / "cgroup.controllers").is_file():
            return None
        parent = ROOT / own.lstrip("/")
        if "memory" not in (parent / "cgroup.subtree_control").read_text().split():
            return None
        d = parent / name
        d.mkdir()
        made = cls([d], [d / "cgroup.procs"], d / "memory.events", 2)
        try:
            _write(d / "memory.max", str(memory_bytes))
            if (d / "memory.swap.max").exists():
                _write(d / "memory.swap.max", "0")
            if max_pids is not None and (d / "pids.max").exists():
                _write(d / "pids.max", str(max_pids))
        except OSError:
            made.remove()
            raise
        return made

    @classmethod
    def _create_v1(cls, name: str, memory_bytes: int, max_pids: int | None) -> "SandboxCgroup | None":
        own = _own_path("memory")
        mem_root = ROOT / "memory"
        if own is None or not (mem_root / "cgroup.procs").exists():
            return None
        d = mem_root / own.lstrip("/") / name
        d.mkdir()
        made = cls([d], [d / "cgroup.procs"], d / "memory.oom_control", 1)
        try:
            _write(d / "memory.limit_in_bytes", str(memory_bytes))
            if (d / "memory.memsw.limit_in_bytes").exists():
                _write(d / "memory.memsw.limit_in_bytes", str(memory_bytes))
            pids_own = _own_path("pids")
            if max_pids is not None and pids_own is not None and (ROOT / "pids").is_dir():
                p = ROOT / "pids" / pids_own.lstrip("/") / name
                p.mkdir()
                made.dirs.append(p)
                made.procs_files.append(p / "cgroup.procs")
                _write(p / "pids.max", str(max_pids))
        except OSError:
            made.remove()
            raise
        return made

    def join_command(self) -> list[str]:
        """Prefix that puts the next exec'd program (and all it starts) into this cgroup."""
        script = (
            'for f in "$@"; do case "$f" in --) shift; break;; esac; echo $$ > "$f" || exit 125; shift; done; exec "$@"'
        )
        return ["/bin/sh", "-c", script, "sh", *map(str, self.procs_files), "--"]

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this cgroup for memory."""
        try:
            for line in self.oom_file.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and int(value) > 0:
                    return True
        except (OSError, ValueError):
            pass
        return False

    def remove(self) -> bool:
        """Kill what is left in the cgroup and remove it; True when every directory is gone."""
        deadline = time.monotonic() + 2.0
        for d in self.dirs:
            while d.exists():
                try:
                    for pid in (d / "cgroup.procs").read_text().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except (ProcessLookupError, PermissionError):
                            pass
                    d.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        return False
                    time.sleep(0.01)
        return True
