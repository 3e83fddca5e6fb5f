"""Append-only JSONL where every record lands as one whole line, even if the process dies.

Each record is encoded first and written with a single ``os.write`` on an ``O_APPEND``
descriptor. A kill during a large write can leave the start of that one record; opening
the file again cuts such a torn tail (``append_only.open_for_append``), so every other record stays
one whole line and the next starts on a fresh one.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable

from grouprl.append_only import open_for_append, read_records
from grouprl.observe.disk import disk_full
from grouprl.safe_text import encodable


class JsonlAppender:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._fd = open_for_append(self.path)  # a torn tail (a killed writer) is cut: records start on a fresh line

    def write(self, record: dict[str, Any]) -> None:
        self.write_many([record])

    def write_many(self, records: Iterable[dict[str, Any]]) -> None:
        """All the records or none: a write that fails (a full disk) is cut back to where it began,
        so the file never ends in a torn line, and raises ``DiskFull`` naming the device and file."""
        # encodable: text a policy or a server wrote may hold a lone surrogate, which UTF-8 cannot write
        data = encodable("".join(_line(record) + "\n" for record in records))
        if not data:
            return
        start = os.fstat(self._fd).st_size
        view = memoryview(data.encode("utf-8"))
        try:
            while view:  # os.write may write less than asked on some filesystems
                view = view[os.write(self._fd, view) :]
        except OSError as err:
            os.ftruncate(self._fd, start)  # frees what was written: always possible on a full disk
            full = disk_full(err, self.path.parent, self.path.name)
            if full is None:
                raise
            raise full from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "JsonlAppender":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _line(record: dict[str, Any]) -> str:
    """One record as strict JSON: a non-finite float (``inf``, ``nan``) is written as null, never as the
    ``Infinity``/``NaN`` that JSON does not have (readers in other languages reject the whole line)."""
    try:
        return json.dumps(record, ensure_ascii=False, default=_plain, allow_nan=False)
    except ValueError:  # rare: walk the record only when it holds one
        return json.dumps(finite_only(record), ensure_ascii=False, default=_plain, allow_nan=False)


def finite_only(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (dicts, lists and tuples walked)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_only(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_only(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read records; a torn final line (a crash mid-write on a foreign writer) is skipped, with a counted
    warning (``append_only.read_records``)."""
    return read_records(path)[0]


def step_of(record: Any, key: str = "step") -> int | None:
    """The record's step as a whole number: ``3``, ``3.0`` (a file round-tripped through pandas) and
    ``"3"`` are step 3; anything else (a note, a record without a step) has none."""
    if not isinstance(record, dict):
        return None
    value = record.get(key)
    if isinstance(value, str):
        value = value.strip()
        try:
            value = float(value) if value else None
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if float(value).is_integer() else None


def truncate_to_step(path: str | os.PathLike, step: int, key: str = "step") -> int:
    """Keep only the records of steps ``<= step`` (and whole lines); returns how many were dropped.

    Used on resume: the steps after the checkpoint are run again and re-logged, so their old records
    must go, however the file was edited meanwhile: steps written as ``3.0``, CRLF line ends, blank
    lines and note lines (kept, as they are not step records). A final line with no newline that
    does not parse is a torn write and goes. The file is rewritten next to itself and renamed into
    place, so a crash (or a full disk) leaves either the old or the new file, never a mix."""
    path = Path(path)
    if not path.is_file():
        return 0
    tmp = path.with_name(path.name + ".truncating")
    dropped = 0
    try:
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            for line in src:
                try:
                    record = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    if not line.endswith(b"\n") and line.strip():  # a torn last write
                        dropped += 1
                        continue
                    record = None
                found = step_of(record, key)
                if found is not None and found > step:
                    dropped += 1
                    continue
                dst.write(line if line.endswith(b"\n") else line + b"\n")
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dropped
