"""JsonlAppender: one whole JSON line per record, also when the writer is SIGKILLed mid-stream."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from grouprl.observe.jsonl import JsonlAppender, read_jsonl


def raw_lines(path) -> tuple[list[bytes], bytes]:
    """Newline-terminated lines, and whatever follows the last newline."""
    data = path.read_bytes()
    *lines, tail = data.split(b"\n")
    return lines, tail


def test_one_complete_json_line_per_record(tmp_path):
    path = tmp_path / "sub" / "log.jsonl"  # parent dirs are created
    records = [
        {"step": 1, "text": "line one\nline two\ttab", "unicode": "Ünïcödé ✓ 你好"},
        {"step": 2, "nested": {"a": [1, 2, {"b": None}]}, "flag": True, "x": 1.5},
        {"step": 3, "tensor": torch.tensor(0.25), "int_tensor": torch.tensor(7), "path": tmp_path},
        {},
    ]
    with JsonlAppender(path) as sink:
        sink.write(records[0])
        sink.write_many(records[1:])
    lines, tail = raw_lines(path)
    assert tail == b""
    assert len(lines) == len(records)
    parsed = [json.loads(line) for line in lines]
    assert parsed[0] == records[0]
    assert parsed[1] == records[1]
    assert parsed[2] == {"step": 3, "tensor": 0.25, "int_tensor": 7, "path": str(tmp_path)}
    assert parsed[3] == {}
    assert "你好" in lines[0].decode("utf-8")  # written as UTF-8, not \u escapes
    assert read_jsonl(path) == parsed


def test_appends_to_an_existing_file(tmp_path):
    path = tmp_path / "log.jsonl"
    with JsonlAppender(path) as sink:
        sink.write({"i": 0})
    with JsonlAppender(path) as sink:
        sink.write({"i": 1})
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"i": 0}, {"i": 1}]


def test_close_is_idempotent(tmp_path):
    sink = JsonlAppender(tmp_path / "log.jsonl")
    sink.close()
    sink.close()


def test_read_jsonl_skips_a_torn_final_line(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"i": 0}\n{"i": 1}\n\n{"i": 2, "pay')
    assert read_jsonl(path) == [{"i": 0}, {"i": 1}]


WRITER = textwrap.dedent("""
    import sys
    from grouprl.observe.jsonl import JsonlAppender
    path, size = sys.argv[1], int(sys.argv[2])
    sink = JsonlAppender(path)
    i = 0
    while True:
        sink.write({"i": i, "payload": str(i % 10) * size, "tail": [i, "end"]})
        i += 1
""")

RECORD_SIZE = 512 * 1024


def _kill_writer_mid_stream(path, script, min_bytes: int) -> None:
    proc = subprocess.Popen([sys.executable, str(script), str(path), str(RECORD_SIZE)])
    try:
        deadline = time.monotonic() + 20
        while not (path.exists() and path.stat().st_size >= min_bytes):
            assert proc.poll() is None, "writer died on its own"
            assert time.monotonic() < deadline, "writer too slow"
            time.sleep(0.002)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("trial", range(3))
def test_sigkill_mid_write_leaves_no_torn_record(tmp_path, trial):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    path = tmp_path / "log.jsonl"
    _kill_writer_mid_stream(path, script, min_bytes=(3 + trial) * RECORD_SIZE)

    lines, tail = raw_lines(path)
    assert len(lines) >= 2
    # every complete line is one whole record, in order, none lost or glued together
    for n, line in enumerate(lines):
        record = json.loads(line)  # raises on a torn or glued line
        assert record["i"] == n
        assert record["payload"] == str(n % 10) * RECORD_SIZE
        assert record["tail"] == [n, "end"]
    # a kill can only lose the record being written: anything after the last newline is a
    # prefix of the next record. (Linux aborts a large write() to a regular file when SIGKILL
    # arrives, so a single os.write is not all-or-nothing; this tail does happen.)
    n = len(lines)
    next_record = json.dumps({"i": n, "payload": str(n % 10) * RECORD_SIZE, "tail": [n, "end"]}).encode()
    assert next_record.startswith(tail)
    assert read_jsonl(path) == [json.loads(line) for line in lines]


def test_reopening_after_a_torn_write_does_not_glue_records(tmp_path):
    """What a resumed run sees after a SIGKILL that cut a write short (see the test above).

    Appending straight after the torn fragment would glue the resumed run's first record to it, and
    every reader would lose that record.
    """
    path = tmp_path / "log.jsonl"
    with JsonlAppender(path) as sink:
        sink.write({"i": 0})
    full = json.dumps({"i": 1, "payload": "x" * 1000}).encode()
    with open(path, "ab") as fh:  # what a write() aborted by SIGKILL leaves behind
        fh.write(full[: len(full) // 2])
    with JsonlAppender(path) as sink:
        sink.write({"i": 2})
        sink.write({"i": 3})
    records = read_jsonl(path)
    assert [r["i"] for r in records] == [0, 2, 3]
    lines, tail = raw_lines(path)
    assert tail == b""
    for line in lines:
        json.loads(line)  # no torn line left behind
