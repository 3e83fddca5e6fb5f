"""The judge's response cache: every answered request, on disk in the run folder, so a resumed run
(or a second run over the same completions) does not pay for the same judgement twice.

The key is a SHA-256 of the request body the endpoint sees (model, messages, sampling settings;
not the URL, so a server restarted on another port still hits). Each process appends to its own
``responses.rank<R>.jsonl`` with one ``os.write`` per record on an ``O_APPEND`` descriptor (a kill
leaves at most a torn last line, skipped on reading), and reads every process's files when it
starts. Only answers are cached: an endpoint error is tried again next time; a reply that does
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


def request_key(request: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


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

    def put(self, key: str, text: str, usage: dict[str, int] | None) -> None:
        record = {"key": key, "text": text, "usage": usage or {}}
        with self._lock:
            self.entries[key] = record
            if self.folder is None:
                return
            if self._fd is None:
                path = self.folder / f"responses.rank{_rank()}.jsonl"
                self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(self._fd, (json.dumps(record, ensure_ascii=False) + "\n").encode())


def read_entries(path: Path) -> dict[str, dict[str, Any]]:
    """The whole lines of a cache file (a torn last line from a killed process is left out)."""
    entries = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True):
        if not line.endswith("\n"):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("key"), str) and isinstance(record.get("text"), str):
            entries[record["key"]] = record
    return entries
