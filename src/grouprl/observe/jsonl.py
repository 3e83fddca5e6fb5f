"""Append-only JSONL where every record lands as one whole line, even if the process dies.

Each record is encoded first and written with a single ``os.write`` on an ``O_APPEND``
descriptor, so a kill can lose the record being written but never leave half a line
that a later record would be glued to.
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
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

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
