"""The resume journal of `grouprl generate` is keyed on the request (messages, model, sampling), not on
(row, k): a rerun after rows were edited asks again for exactly the edited rows; a rerun with another
model, or other sampling settings, answers nothing from the first run's journal. A hand-damaged
journal line is skipped (its request is asked again), never a traceback.

Against a real `transformers serve` on 127.0.0.1 (tests/generate/test_generate_pipeline.py's server)."""

from __future__ import annotations

import json
import shutil
import subprocess

from test_generate_pipeline import WORDS, Server, command, tiny_model, write_rows  # noqa: F401 - fixtures


def _run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _outputs(out):
    return [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]


def test_the_journal_answers_only_the_same_request(tiny_model, tmp_path):  # noqa: F811 - the fixture
    server = Server(tiny_model, tmp_path / "serve.log")
    try:
        base_url = server.start()
        data = write_rows(tmp_path / "rows.jsonl", 5)
        out = tmp_path / "gen"
        assert _run(command(data, base_url, out, tiny_model))["done_now"] == 10
        first = _outputs(out)

        # Rows 1 and 3 edited: their 4 requests are new, the other 6 come from the journal.
        rows = [json.loads(line) for line in data.read_text().splitlines()]
        for i in (1, 3):
            rows[i]["instruction"] = "golf hotel alpha"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        summary = _run(command(data, base_url, out, tiny_model))
        assert (summary["done_before"], summary["done_now"]) == (6, 4)
        again = _outputs(out)
        assert [r["instruction"] for r in again] == [r["instruction"] for r in rows]
        for i in (0, 2, 4):
            assert again[i]["generations"] == first[i]["generations"]

        # Another model (the same weights under another name, served alone as `transformers serve MODEL` does):
        # nothing is answered from model A's journal.
        other = tmp_path / "model_b"
        shutil.copytree(tiny_model, other)
        server.kill()
        server = Server(other, tmp_path / "serve_b.log")
        base_url = server.start()
        summary = _run(command(data, base_url, out, other))
        assert (summary["done_before"], summary["done_now"]) == (0, 10)
        assert {r["model_name"] for r in _outputs(out)} == {str(other)}
        # Other sampling settings are other requests too; the same ones again are all answered.
        assert _run(command(data, base_url, out, other, "--top_p", "0.5"))["done_before"] == 0
        assert _run(command(data, base_url, out, other))["done_now"] == 0

        # A damaged journal: a garbage line, a record with its key cut off, a line of another shape.
        journal = out / "requests.jsonl"
        lines = journal.read_text().splitlines(keepends=True)
        last = json.loads(lines[-1])
        del last["key"]
        journal.write_text("".join(lines[:-1]) + "not json\n" + json.dumps(last) + "\n[1, 2]\n")
        summary = _run(command(data, base_url, out, other, "--top_p", "0.5"))  # the last line's request
        assert (summary["done_before"], summary["done_now"]) == (9, 1)
    finally:
        server.kill()
