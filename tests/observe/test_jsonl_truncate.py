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
