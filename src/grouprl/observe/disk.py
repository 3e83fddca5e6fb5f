"""A full disk (or quota, or file-size limit) named for people: the device and the folder.

Writers hit it in many forms: an ``OSError`` with ``ENOSPC``, torch's serializer ("unexpected
pos"), safetensors' Rust error text ("StorageFull"). :func:`disk_full` finds the cause anywhere in
an exception's chain and makes one line of it; :func:`device_of` says which filesystem is full.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

FULL = {
    errno.ENOSPC: "No space left on device",
    errno.EDQUOT: "Disk quota exceeded",
    errno.EFBIG: "File too large (a file-size limit: RLIMIT_FSIZE or the filesystem's)",
}
_TEXTS = {
    "No space left on device": errno.ENOSPC,
    "StorageFull": errno.ENOSPC,
    "code: 28": errno.ENOSPC,
    "Disk quota exceeded": errno.EDQUOT,
    "File too large": errno.EFBIG,
    "code: 27": errno.EFBIG,
}


class DiskFull(RuntimeError):
    """A write failed because the device is full; the message names the device and the folder."""


def full_disk_errno(err: BaseException | None) -> int | None:
    """ENOSPC / EDQUOT / EFBIG when that is what ``err`` (or anything in its chain) comes down to."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, DiskFull):
            return errno.ENOSPC
        code = getattr(err, "errno", None)
        if code in FULL:
            return code
        text = str(err)
        for known, code in _TEXTS.items():
            if known in text:
                return code
        err = err.__cause__ or err.__context__
    return None


def device_of(path: str | os.PathLike) -> str:
    """The filesystem holding ``path``: its source, type and mount point (from /proc/self/mountinfo)."""
    target = Path(path).resolve()
    while not target.exists() and target != target.parent:
        target = target.parent
    best = None
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                mount_point = left.split()[4].replace("\\040", " ")
                fstype, source = (right.split() + ["?", "?"])[:2]
                if (target == Path(mount_point) or Path(mount_point) in target.parents) and (
                    best is None or len(mount_point) >= len(best[0])
                ):
                    best = (mount_point, fstype, source)
    except OSError:
        pass
    if best is None:
        dev = os.stat(target).st_dev
        return f"device {os.major(dev)}:{os.minor(dev)}"
    mount_point, fstype, source = best
    return f"device {source}, a {fstype} mounted at {mount_point}"


def disk_full(err: BaseException, folder: str | os.PathLike, what: str | None = None) -> DiskFull | None:
    """One line for a write that failed on a full device, or None when ``err`` is something else."""
    if isinstance(err, DiskFull):
        return err
    code = full_disk_errno(err)
    if code is None:
        return None
    where = getattr(err, "filename", None) or folder
    writing = f" writing {what}" if what else (f" writing {where}" if where != folder else "")
    return DiskFull(
        f"{FULL[code]} ({device_of(folder)}){writing} in {Path(folder)}; earlier checkpoints and "
        "whole log lines are kept: free space there, then --resume_from_checkpoint last"
    )
