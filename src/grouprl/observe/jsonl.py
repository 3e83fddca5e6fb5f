"""Append-only JSONL where every record lands as one whole line, even if the process dies.

Each record is encoded first and written with a single ``os.write`` on an ``O_APPEND``
descriptor. A kill during a large write can leave the start of that one record; opening
the file again cuts such a torn tail, so every other record stays one whole line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable


class JsonlAppender:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        self._drop_torn_tail()

    def _drop_torn_tail(self) -> None:
        """Cut off a partial record after the last newline. Linux aborts a large ``write`` to a
        regular file when SIGKILL arrives, so a killed writer can leave the start of a record;
        without this the next record (a resumed run) would be glued to it and unreadable."""
        size = end = os.fstat(self._fd).st_size
        while end > 0:
            start = max(0, end - 65536)
            newline = os.pread(self._fd, end - start, start).rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            end = start
        if end < size:
            os.ftruncate(self._fd, end)

    def write(self, record: dict[str, Any]) -> None:
        self.write_many([record])

    def write_many(self, records: Iterable[dict[str, Any]]) -> None:
        for record in records:
            data = (json.dumps(record, ensure_ascii=False, default=_plain) + "\n").encode("utf-8")
            view = memoryview(data)
            while view:  # os.write may write less than asked on some filesystems
                view = view[os.write(self._fd, view):]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "JsonlAppender":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read records; a torn final line (a crash mid-write on a foreign writer) is skipped."""
    rows = []
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def truncate_to_step(path: str | os.PathLike, step: int, key: str = "step") -> int:
    """Keep only the records with ``record[key] <= step`` (and whole lines); returns how many
    were dropped. Used on resume: the steps after the checkpoint are run again and re-logged,
    so their old records must go. The file is rewritten next to itself and renamed into place,
    so a crash leaves either the old or the new file, never a mix."""
    path = Path(path)
    if not path.is_file():
        return 0
    tmp = path.with_name(path.name + ".truncating")
    dropped = 0
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        for line in src:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                dropped += bool(line.strip())  # a torn line from a killed writer
                continue
            if isinstance(record, dict) and isinstance(record.get(key), int) and record[key] > step:
                dropped += 1
                continue
            dst.write(line if line.endswith(b"\n") else line + b"\n")
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, path)
    return dropped
