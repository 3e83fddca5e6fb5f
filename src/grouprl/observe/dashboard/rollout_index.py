"""A byte-offset index of ``rollouts/rollouts.jsonl`` by training step, built incrementally.

The rollout log of a long run can be hundreds of MB, so the dashboard never loads it whole:
it scans the file once to learn where each step's records start and end, keeps only those
offsets, and reads one step's byte range when a person looks at that step. While a run trains
the file only grows, so ``refresh()`` reads just the bytes appended since the last call.

The trainer writes one step's episodes together, each line beginning ``{"step": N, ...}``; the
scanner reads the step from that prefix and parses a line as JSON only when it does not start
that way (a foreign writer's key order), so a 250 MB log is indexed in about a second.
A resumed run may write a step again after a crash: the later span wins, since that is the one
whose update the final model carries.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grouprl.observe.jsonl import step_of

# The trainer's line prefix: step, then prompt_id and group (the group is optional for the match).
_LINE_PREFIX = re.compile(rb'\{"step": ?(-?\d+)(?:, "prompt_id": "(?:[^"\\]|\\.)*", "group": ?(-?\d+))?[,}]')
_CHUNK = 8 << 20
# Fields whose text a search looks at (the raw line also holds keys and numbers).
SEARCHED_FIELDS = ("prompt", "completion", "prediction", "ground_truth", "reward_reasons", "reward_errors")


@dataclass
class StepSpan:
    step: int
    start: int  # byte offset of the step's first line
    end: int  # byte offset just past its last line
    episodes: int


class RolloutIndex:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.spans: dict[int, StepSpan] = {}
        self.indexed_bytes = 0  # everything before this offset is indexed (always a line start)
        self.bytes_read = 0  # total bytes scanned, so tests can see refresh() is incremental
        self.unreadable_lines = 0  # lines that are not JSON records with a step
        self._last: StepSpan | None = None
        self._max_step = -(1 << 62)
        self._last_group: int | None = None
        self._identity: tuple[int, int] | None = None

    def refresh(self) -> int:
        """Index the complete lines appended since the last call; returns the bytes newly indexed.
        A file that shrank or was replaced (a new run in the same folder) is indexed from scratch."""
        with self._lock:
            try:
                st = self.path.stat()
            except FileNotFoundError:
                self._reset()
                return 0
            if st.st_size < self.indexed_bytes or (self._identity and self._identity != (st.st_dev, st.st_ino)):
                self._reset()
            self._identity = (st.st_dev, st.st_ino)
            before = self.indexed_bytes
            with open(self.path, "rb") as fh:
                fh.seek(self.indexed_bytes)
                tail = b""
                while True:
                    chunk = fh.read(_CHUNK)
                    if not chunk:
                        break
                    self.bytes_read += len(chunk)
                    data = tail + chunk
                    cut = data.rfind(b"\n") + 1  # a torn or still-being-written last line waits
                    self._index_lines(data[:cut], self.indexed_bytes)
                    self.indexed_bytes += cut
                    tail = data[cut:]
            return self.indexed_bytes - before

    def _index_lines(self, data: bytes, base: int) -> None:
        pos = base
        step: int | None
        for line in data.split(b"\n")[:-1]:  # data ends with a newline: the last piece is empty
            end = pos + len(line) + 1
            m = _LINE_PREFIX.match(line)
            if m:
                step, group = int(m.group(1)), None if m.group(2) is None else int(m.group(2))
            else:
                step, group = _step_and_group(line)
            if step is not None:
                self._add(step, group, pos, end)
            elif line.strip():
                self.unreadable_lines += 1
            pos = end

    def _add(self, step: int, group: int | None, start: int, end: int) -> None:
        last = self._last
        # groups are written in increasing order, so a lower group id right after a step's lines
        # is that step written again (a resumed run), not more of it
        restarted = group is not None and self._last_group is not None and group < self._last_group
        self._last_group = group
        if last is not None and last.step == step and last.end == start and not restarted:
            last.end = end
            last.episodes += 1
            return
        self._last = self.spans[step] = StepSpan(step, start, end, 1)  # a repeated step: the later span wins
        if step < self._max_step:  # keep step order even when a resumed run rewrote an earlier step
            self.spans = dict(sorted(self.spans.items()))
        self._max_step = max(self._max_step, step)

    def steps(self) -> list[tuple[int, int]]:
        """(step, episodes) for every indexed step, in step order."""
        self.refresh()
        return [(s.step, s.episodes) for s in self.spans.values()]

    def records(self, step: int) -> list[dict[str, Any]]:
        """Every rollout record of one step, read from its byte range only."""
        self.refresh()
        span = self.spans.get(step)
        if span is None:
            return []
        with open(self.path, "rb") as fh:
            fh.seek(span.start)
            data = fh.read(span.end - span.start)
        return [row for row in parse_lines(data) if row.get("step") == step]

    def search(self, query: str, limit: int = 50, from_step: int | None = None) -> dict[str, Any]:
        """Groups (step, group) whose prompt, completion, prediction, ground truth, reasons or
        errors contain ``query`` (case-insensitive), in step order. It stops at the end of the step
        in which ``limit`` hits were reached; ``next_step`` continues from there (None: searched all)."""
        self.refresh()
        needle = query.lower()
        raw = needle.encode("utf-8")
        hits: list[dict[str, Any]] = []
        seen: set[tuple[int, Any]] = set()
        skipped = 0
        steps = [s for s in self.spans.values() if from_step is None or s.step >= from_step]
        with open(self.path, "rb") as fh:
            for span in steps:
                if len(hits) >= limit:
                    return {"hits": hits, "next_step": span.step, "skipped_lines": skipped}
                fh.seek(span.start)
                data = fh.read(span.end - span.start)
                if raw not in data.lower():  # most steps are rejected here, without parsing JSON
                    continue
                for line in data.splitlines():
                    if raw not in line.lower():
                        continue
                    row = _record(line)
                    if row is None:  # a corrupt line: skipped and counted, the search goes on
                        skipped += 1
                        continue
                    key = (span.step, row.get("group"))
                    if key in seen or not _text_matches(row, needle):
                        continue
                    seen.add(key)
                    hits.append(
                        {
                            "step": span.step,
                            "group": row.get("group"),
                            "prompt_id": row.get("prompt_id"),
                            "snippet": _snippet(row, needle),
                        }
                    )
        return {"hits": hits, "next_step": None, "skipped_lines": skipped}


def parse_lines(data: bytes) -> list[dict[str, Any]]:
    """The JSON objects of some JSONL bytes; a line that is not one is skipped."""
    return [row for row in map(_record, data.splitlines()) if row is not None]


def _record(line: bytes) -> dict[str, Any] | None:
    """One line as a JSON object, or None: not JSON, not UTF-8, nested past the parser's depth, not an object."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):  # ValueError covers JSONDecodeError and UnicodeDecodeError
        return None
    return row if isinstance(row, dict) else None


def _step_and_group(line: bytes) -> tuple[int | None, int | None]:
    row = _record(line)
    step = step_of(row)
    if row is None or step is None:
        return None, None
    return step, row["group"] if isinstance(row.get("group"), int) else None


def _field_text(row: dict[str, Any], name: str) -> str:
    value = row.get(name)
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _text_matches(row: dict[str, Any], needle: str) -> bool:
    return any(needle in _field_text(row, f).lower() for f in SEARCHED_FIELDS)


def _snippet(row: dict[str, Any], needle: str, width: int = 60) -> str:
    for name in SEARCHED_FIELDS:
        text = _field_text(row, name)
        at = text.lower().find(needle)
        if at >= 0:
            return f"{name}: …{text[max(0, at - width // 2) : at + len(needle) + width // 2]}…"
    return ""
