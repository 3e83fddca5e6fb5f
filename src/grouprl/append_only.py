"""Append-only JSONL files that survive a kill mid-write: the one rule for every writer and reader.

A process killed during a write can leave the start of a record with no newline (Linux aborts a large
``write`` to a regular file when SIGKILL arrives). Appending after it would glue the next record onto
that torn line, and a reader would lose both: a paid judge answer asked again, a step's metrics gone.

* Writers open with :func:`open_for_append`, which cuts a torn tail back to the last newline, so the
  next record starts on a fresh line (the observe/ ``JsonlAppender``, the judge cache).
* Readers use :func:`read_records`: the lines that parse; a torn tail and lines that do not parse are
  skipped and counted, with one warning per file naming how many.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def drop_torn_tail(fd: int) -> int:
    """Cut the file behind ``fd`` back to just after its last newline; the number of bytes cut."""
    size = end = os.fstat(fd).st_size
    while end > 0:
        start = max(0, end - 65536)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    if end < size:
        os.ftruncate(fd, end)
        log.warning("fd %d: cut a torn last record of %d bytes (a writer was killed mid-write)", fd, size - end)
    return size - end


def open_for_append(path: str | os.PathLike) -> int:
    """An ``O_APPEND`` descriptor on ``path`` (created with its folder), its torn tail cut off."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        drop_torn_tail(fd)
    except OSError:
        os.close(fd)
        raise
    return fd


def read_records(path: str | os.PathLike) -> tuple[list[Any], int]:
    """(the file's JSON lines, how many lines were skipped: a torn tail, a line that does not parse). Blank
    lines are neither; a last line without a newline that parses whole is kept (a foreign writer's file).
    One warning names the file when any was skipped."""
    records: list[Any] = []
    skipped = 0
    with open(path, "rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except (ValueError, RecursionError):  # JSONDecodeError, bad UTF-8, int_max_str_digits
                skipped += 1
    if skipped:
        log.warning(
            "%s: skipped %d line(s) that are not whole JSON records (a torn tail from a killed writer, or an edit)",
            path,
            skipped,
        )
    return records, skipped
