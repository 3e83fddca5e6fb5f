"""Resume cuts a log back to the checkpoint's step (observe/jsonl.truncate_to_step)."""

from __future__ import annotations

import json

from grouprl.observe.jsonl import JsonlAppender, read_jsonl, truncate_to_step


def test_truncate_keeps_steps_up_to_the_checkpoint_and_drops_a_torn_tail(tmp_path):
    log = tmp_path / "metrics.jsonl"
    with JsonlAppender(log) as out:
        out.write_many([{"step": s, "loss": s / 10} for s in range(1, 7)])
    with open(log, "ab") as f:
        f.write(b'{"step": 7, "lo')  # a writer killed mid-record
    assert truncate_to_step(log, 4) == 3
    assert [r["step"] for r in read_jsonl(log)] == [1, 2, 3, 4]
    assert log.read_bytes().endswith(b"\n") and not (tmp_path / "metrics.jsonl.truncating").exists()
    with JsonlAppender(log) as out:  # the resumed run appends after step 4
        out.write({"step": 5, "loss": 0.0})
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [1, 2, 3, 4, 5]


def test_truncate_by_another_key_and_missing_file(tmp_path):
    log = tmp_path / "rollouts.jsonl"
    log.write_text("".join(json.dumps({"train_step": s, "x": 1}) + "\n" for s in (1, 1, 2, 3)))
    assert truncate_to_step(log, 1, key="train_step") == 2
    assert len(read_jsonl(log)) == 2
    assert truncate_to_step(tmp_path / "absent.jsonl", 3) == 0


def test_truncate_reads_steps_however_the_file_was_edited(tmp_path):
    """Steps as 3.0 (pandas), "3" (a spreadsheet), CRLF line ends, blank lines and note lines: every
    record of a later step goes, notes stay, and nothing of an earlier step is lost."""
    log = tmp_path / "metrics.jsonl"
    log.write_bytes(
        b'{"step": 1.0, "loss": 1}\r\n\r\n{"step": "2", "loss": 2}\r\n# resumed by hand\r\n'
        b'{"step": 3.0, "loss": 3}\r\n{"step": 4, "loss": 4}\n{"loss": 5}\n[1, 2]\n{"step": 2.5}\n'
        b'{"step": true}\n{"step": "3"}'
    )
    assert truncate_to_step(log, 2) == 3  # 3.0, 4 and "3" (its missing newline is no tear: it parses)
    kept = log.read_bytes().splitlines()
    assert kept == [
        b'{"step": 1.0, "loss": 1}',
        b"",
        b'{"step": "2", "loss": 2}',
        b"# resumed by hand",
        b'{"loss": 5}',
        b"[1, 2]",
        b'{"step": 2.5}',
        b'{"step": true}',
    ]
    assert log.read_bytes().endswith(b"\n")
