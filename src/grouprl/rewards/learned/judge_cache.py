"""The judge's response cache: every answered request, on disk in the run folder, so a resumed run
(or a second run over the same completions) does not pay for the same judgement twice.

The key is a SHA-256 of the request body the endpoint sees (model, messages, sampling settings;
not the URL, so a server restarted on another port still hits). Each process appends to its own
``responses.rank<R>.jsonl`` with one ``os.write`` per record on an ``O_APPEND`` descriptor (a kill
leaves at most a torn last line: cut when the file is opened again, so the next answer starts on a
fresh line and is not lost, and skipped with a counted warning on reading; ``append_only``), and
reads every process's files when it starts. A reply is stored with its ``finish_reason``; the HTTP
client caps its size (``judge_client.MAX_BYTES``), so no entry is larger than that. Only answers are cached: an endpoint error is tried again next time; a reply that does
not parse is cached (the same request would be answered the same way at temperature 0, and it was
paid for), and stays that sample's error.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from grouprl.append_only import open_for_append, read_records
from grouprl.safe_text import encodable


def request_key(request: dict[str, Any]) -> str:
    return hashlib.sha256(encodable(json.dumps(request, sort_keys=True, ensure_ascii=False)).encode()).hexdigest()


def _rank() -> int:
    return int(os.environ.get("RANK", 0))


class JudgeCache:
    """key -> {"text": reply, "usage": {...}}; ``folder=None`` keeps it in memory only."""

    def __init__(self, folder: str | Path | None):
        self.folder = Path(folder) if folder is not None else None
        self.entries: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._fd: int | None = None
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            for path in sorted(self.folder.glob("responses.rank*.jsonl")):
                self.entries.update(read_entries(path))

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.entries.get(key)

    def put(self, key: str, text: str, usage: dict[str, int] | None, finish_reason: str | None = None) -> None:
        record = {"key": key, "text": text, "usage": usage or {}, "finish_reason": finish_reason}
        with self._lock:
            self.entries[key] = record
            if self.folder is None:
                return
            if self._fd is None:
                self._fd = open_for_append(self.folder / f"responses.rank{_rank()}.jsonl")
            os.write(self._fd, encodable(json.dumps(record, ensure_ascii=False) + "\n").encode())


def read_entries(path: Path) -> dict[str, dict[str, Any]]:
    """The whole records of a cache file (a torn last line from a killed process is skipped and counted)."""
    records, _ = read_records(path)
    return {
        r["key"]: r
        for r in records
        if isinstance(r, dict) and isinstance(r.get("key"), str) and isinstance(r.get("text"), str)
    }
