"""A model folder in the cache, written once, whole, by one writer at a time.

``materialize_folder(target, write)`` is the one way a cached model folder comes to be
(``models/pretrained.py`` uses it for packaged models):

* **one writer**: an exclusive ``flock`` on ``.NAME.lock`` beside the folder; a second writer waits
  for it (saying so once) and then reuses the folder the first one finished;
* **whole or absent**: the folder is written under ``.NAME.partial-XXXX`` and renamed when complete;
  staging folders that a killed writer left behind are removed by the next writer (it holds the lock,
  so no live writer owns them);
* **checked when reused**: the size and sha256 of every file are recorded at write time in
  ``checksums.json`` (written last); a folder whose files do not match (truncated weights, a folder
  written before checksums were recorded) is never reported ready: a folder this module wrote is
  written again, anything else is refused in one line;
* **a read-only cache** is one line naming the folder and what to do (a finished folder in it is
  still used as it is).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from grouprl.config import ConfigError

log = logging.getLogger(__name__)

CHECKSUMS = "checksums.json"


class ModelCacheError(ConfigError):
    """A cached model folder that cannot be written or trusted (one line)."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_checksums(folder: Path) -> None:
    """Write ``checksums.json``: the size and sha256 of every other file of ``folder`` (written last).
    Files are hashed two at a time (hashlib releases the GIL on large blocks): a checkpoint's weights and
    optimizer state, 0.5 and 1.1 GB for SmolLM2, in ~0.7 s instead of ~1.0 s."""
    from concurrent.futures import ThreadPoolExecutor

    paths = [p for p in sorted(folder.rglob("*")) if p.is_file() and p.name != CHECKSUMS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        digests = list(pool.map(sha256_file, paths))
    files = {str(p.relative_to(folder)): {"size": p.stat().st_size, "sha256": d} for p, d in zip(paths, digests)}
    (folder / CHECKSUMS).write_text(json.dumps({"files": files}, indent=1) + "\n")


def damage(folder: str | Path, thorough: bool = True) -> str | None:
    """Why ``folder`` is not a whole model folder as written (one phrase), or None when it is.
    ``thorough``: compare every file's sha256 too (else sizes only: cheap enough for every look)."""
    folder = Path(folder)
    record = folder / CHECKSUMS
    if not record.is_file():
        return f"no {CHECKSUMS} (not written to the end, or written before grouprl recorded checksums)"
    try:
        files = json.loads(record.read_text())["files"]
        expected = {str(name): (int(v["size"]), str(v["sha256"])) for name, v in files.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        return f"{CHECKSUMS} is unreadable ({type(err).__name__})"
    for name, (size, digest) in expected.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} is {path.stat().st_size} bytes, {size} when it was written"
        if thorough and sha256_file(path) != digest:
            return f"{name} does not have the sha256 recorded when it was written"
    return None


def _not_writable(parent: Path, err: OSError) -> ModelCacheError:
    return ModelCacheError(
        f"model cache {parent} is not writable ({err.strerror or err}); set GROUPRL_CACHE to a "
        "writable folder, or pass --out (init-model) / a model folder (train)"
    )


def _lock(parent: Path, name: str):
    """The open lock file of ``parent/name``, held exclusively (waiting for another writer, said once)."""
    try:
        parent.mkdir(parents=True, exist_ok=True)
        handle = open(parent / f".{name}.lock", "a+")  # noqa: SIM115 - held for the whole write
    except OSError as err:
        raise _not_writable(parent, err) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log.warning("another grouprl is writing %s; waiting for it to finish", parent / name)
        fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def _remove_leftovers(parent: Path, name: str) -> None:
    """Staging and set-aside folders a killed writer left (we hold the lock: no live writer owns them)."""
    for pattern in (f".{name}.partial-*", f".{name}.damaged-*"):
        for leftover in parent.glob(pattern):
            shutil.rmtree(leftover, ignore_errors=True)


def _readable_by_all(folder: Path) -> None:
    # mkdtemp makes the folder private (0700); a shared cache must be readable like any other folder
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.rglob("*"):
        path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)


def materialize_folder(
    target: str | Path, write: Callable[[Path], None], ours: Callable[[Path], bool], what: str = "model folder"
) -> Path:
    """``target``, whole: reused when its checksums hold, else written by ``write(staging_folder)``.

    ``ours(folder)``: whether an existing folder that is not whole was written by this writer (then it is
    written again); any other non-empty folder is refused, never overwritten.
    """
    target = Path(target)
    if damage(target) is None:
        return target
    handle = _lock(target.parent, target.name)
    try:
        if damage(target) is None:  # another writer finished it while we waited
            return target
        _remove_leftovers(target.parent, target.name)
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            why = damage(target)
            if not target.is_dir() or not ours(target):
                raise ModelCacheError(
                    f"{target} exists and is not a finished {what} ({why}); remove it or choose another --out"
                )
            log.warning("%s is damaged (%s); writing it again", target, why)
        try:
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
        except OSError as err:
            raise _not_writable(target.parent, err) from None
        try:
            write(staging)
            record_checksums(staging)
            _readable_by_all(staging)
            if target.is_dir() and any(target.iterdir()):  # a damaged folder of ours: set aside, then removed
                target.rename(Path(tempfile.mkdtemp(prefix=f".{target.name}.damaged-", dir=target.parent)) / "old")
            elif target.is_dir():
                target.rmdir()  # empty; rename cannot replace a directory
            os.rename(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            _remove_leftovers(target.parent, target.name)
        return target
    finally:
        handle.close()
