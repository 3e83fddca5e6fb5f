"""Append-only files after a kill mid-write (issue 32, class 10): no later record is lost.

A real process appends whole records through the real writer, then starts one more and is SIGKILLed
with only its start on disk (a torn last line). Every append-only writer (the judge cache, the JSONL
appender behind rollouts.jsonl, metrics.jsonl and `grouprl generate`'s journal) must then put its next
record on a fresh line, and every reader must keep all whole records and count the torn one.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

from grouprl.observe.jsonl import JsonlAppender, read_jsonl
from grouprl.rewards.learned.judge_cache import JudgeCache

WRITERS = {
    "judge_cache": (
        "from grouprl.rewards.learned.judge_cache import JudgeCache\n"
        "cache = JudgeCache(folder)\n"
        "for i in range(3):\n"
        "    cache.put(f'k{i}', 'SCORE: ' + str(i), {'prompt_tokens': 1})\n"
        "fd = cache._fd\n"
    ),
    "jsonl": (
        "from grouprl.observe.jsonl import JsonlAppender\n"
        "sink = JsonlAppender(folder + '/responses.rank0.jsonl')\n"
        "sink.write_many([{'key': f'k{i}', 'text': 'SCORE: ' + str(i)} for i in range(3)])\n"
        "fd = sink._fd\n"
    ),
}


def killed_mid_write(folder, writer: str) -> None:
    script = (
        textwrap.dedent(f"""
        import os, signal, sys
        folder = {str(folder)!r}
    """)
        + WRITERS[writer]
        + 'os.write(fd, b\'{"key": "torn", "text": "SCO\')\nos.kill(os.getpid(), signal.SIGKILL)\n'
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == -9, done.stderr
    raw = (folder / "responses.rank0.jsonl").read_bytes()
    assert not raw.endswith(b"\n")  # the torn line is there


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_records_appended_after_a_torn_tail_are_kept(tmp_path, writer, caplog):
    killed_mid_write(tmp_path, writer)
    if writer == "judge_cache":
        JudgeCache(tmp_path).put("after", "SCORE: 9", {})  # a resumed run pays for one more answer
        with caplog.at_level(logging.WARNING):
            again = JudgeCache(tmp_path)
        assert again.get("after")["text"] == "SCORE: 9"
        assert {"k0", "k1", "k2", "after"} <= set(again.entries)
    else:
        with JsonlAppender(tmp_path / "responses.rank0.jsonl") as sink:
            sink.write({"key": "after", "text": "SCORE: 9"})
        with caplog.at_level(logging.WARNING):
            rows = read_jsonl(tmp_path / "responses.rank0.jsonl")
        assert [r["key"] for r in rows] == ["k0", "k1", "k2", "after"]
    assert (tmp_path / "responses.rank0.jsonl").read_bytes().endswith(b'"SCORE: 9"}\n') or writer == "judge_cache"


@pytest.mark.parametrize("reader", ["judge_cache", "read_jsonl"])
def test_readers_skip_a_torn_tail_with_a_counted_warning(tmp_path, reader, caplog):
    path = tmp_path / "responses.rank0.jsonl"
    path.write_bytes(b'{"key": "a", "text": "SCORE: 1"}\n{"key": "torn", "te')
    with caplog.at_level(logging.WARNING):
        found = JudgeCache(tmp_path).entries if reader == "judge_cache" else read_jsonl(path)
    assert len(found) == 1
    assert any("skipped 1 line" in r.getMessage() for r in caplog.records)
