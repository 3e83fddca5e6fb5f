"""Sandbox uids that are unique on the whole machine, not just in one process.

As root every sandbox run gets its own uid, so that its process limit (``RLIMIT_NPROC`` counts
every task of a uid) and its files belong to it alone. Several trainer processes run on one machine
(data-parallel ranks, two jobs, ``grouprl rewards preview`` beside a run): a per-process list of
slots would hand the same uid to two of them, and one run's fork bomb would then exhaust the
other's process limit. So a slot is taken by an exclusive ``flock`` on its own file under
``LOCK_DIR``; the kernel drops the lock when the holder closes it or dies (a crash leaks nothing).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading

from grouprl.rewards.sandbox.bwrap import UID_BASE, UID_SLOTS

_held: dict[int, int] = {}  # uid -> the open lock file's descriptor
_lock = threading.Lock()
_next = [0]  # where this process starts looking (spreads concurrent takers over the slots)


def lock_dir() -> str:
    """Root's own directory for the slot locks (``/run`` where it exists: a tmpfs, cleared at boot);
    ``GROUPRL_SANDBOX_UID_LOCKS`` overrides it. Not writable by anyone else."""
    where = os.environ.get("GROUPRL_SANDBOX_UID_LOCKS") or (
        "/run/grouprl-sandbox-uids"
        if os.access("/run", os.W_OK)
        else os.path.join(tempfile.gettempdir(), f"grouprl-sandbox-uids-{os.getuid()}")
    )
    os.makedirs(where, mode=0o700, exist_ok=True)
    info = os.lstat(where)
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise RuntimeError(
            f"sandbox uid lock directory {where} is not ours alone (owner {info.st_uid}, "
            f"mode {oct(info.st_mode & 0o777)}); expected owner {os.getuid()}, mode 0700"
        )
    return where


def acquire_uid() -> int:
    """A uid no other sandbox run on this machine holds; ``RuntimeError`` when all are taken."""
    where = lock_dir()
    with _lock:
        start = _next[0]
        _next[0] = (start + 1) % UID_SLOTS
    for i in range(UID_SLOTS):
        slot = (start + i) % UID_SLOTS
        fd = os.open(os.path.join(where, str(slot)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another run (this process's or another's) holds it
            os.close(fd)
            continue
        with _lock:
            _held[UID_BASE + slot] = fd
        return UID_BASE + slot
    raise RuntimeError(f"all {UID_SLOTS} sandbox uids are in use on this machine (locks in {where})")


def release_uid(uid: int) -> None:
    """Give the uid back once its run (and every process it started) has ended."""
    with _lock:
        fd = _held.pop(uid, None)
    if fd is not None:
        os.close(fd)  # drops the flock
