"""The dashboard's rollout index on a large generated rollouts.jsonl: built once, refreshed by
reading only appended bytes, one step read from its byte range, served by the real server."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from grouprl.observe.dashboard.rollout_index import RolloutIndex
from grouprl.observe.dashboard.server import DashboardServer
from grouprl.observe.jsonl import JsonlAppender

GROUPS, K = 64, 8


def step_block(step: int, pad: int = 600) -> bytes:
    """One step's rollout lines in the trainer's field order (JsonlAppender's encoding)."""
    rows = []
    for g in range(GROUPS):
        for e in range(K):
            rows.append(
                {
                    "step": step,
                    "prompt_id": f"p{g:04d}",
                    "group": g,
                    "prompt": f"<|im_start|>user\nquestion {g}<|im_end|>\n" + "x" * pad,
                    "completion": f"answer {g}-{e}",
                    "prediction": str(e),
                    "ground_truth": "3",
                    "reward": e / K,
                    "rewards": {"accuracy": e / K},
                    "correct": e == 3,
                    "advantage": e / K - 0.4,
                    "truncated": False,
                    "reward_errors": [],
                    "reward_reasons": {},
                    "episode_length": 1,
                }
            )
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


@pytest.fixture(scope="module")
def big_log(tmp_path_factory):
    """~120 MB: 240 steps x 512 episodes. Lines are made once and re-stamped per step (fast)."""
    path = tmp_path_factory.mktemp("big") / "rollouts" / "rollouts.jsonl"
    path.parent.mkdir()
    block = step_block(0)
    with open(path, "wb") as fh:
        for step in range(1, 241):
            fh.write(block.replace(b'{"step": 0,', b'{"step": %d,' % step))
    return path


def test_index_large_file_then_read_one_step(big_log):
    size = big_log.stat().st_size
    assert size > 100 << 20
    index = RolloutIndex(big_log)
    started = time.perf_counter()
    assert index.refresh() == size
    build = time.perf_counter() - started
    assert [s for s, _ in index.steps()] == list(range(1, 241))
    assert {n for _, n in index.steps()} == {GROUPS * K}
    span = index.spans[120]
    assert span.end - span.start == len(step_block(120))  # exactly that step's bytes
    started = time.perf_counter()
    rows = index.records(120)
    read = time.perf_counter() - started
    assert len(rows) == GROUPS * K and {r["step"] for r in rows} == {120}
    assert rows[3 * K + 5]["completion"] == "answer 3-5"
    # generous bounds for a shared 2-core machine (measured here: ~0.5 s to index, ~0.03 s to read)
    assert build < 30 and read < 2, (build, read)


def test_refresh_reads_only_appended_bytes(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    with JsonlAppender(path) as log:
        for step in (1, 2):
            log.write_many(json.loads(line) for line in step_block(step, pad=10).splitlines())
    index = RolloutIndex(path)
    index.refresh()
    before_read, before_size = index.bytes_read, path.stat().st_size
    appended = step_block(3, pad=10)
    with open(path, "ab") as fh:
        fh.write(appended[:-40])  # a writer mid-line: the torn last line must wait
    index.refresh()
    assert index.steps()[-1] == (3, GROUPS * K - 1)
    with open(path, "ab") as fh:
        fh.write(appended[-40:])
    last_line = len(appended) - appended[:-1].rfind(b"\n") - 1
    assert index.refresh() == last_line  # the completed line, and nothing else
    assert index.steps()[-1] == (3, GROUPS * K)
    # everything before the old end was scanned once only
    assert index.bytes_read - before_read < len(appended) + 65536
    assert index.indexed_bytes == path.stat().st_size == before_size + len(appended)


def test_resumed_run_rewrites_a_step_and_foreign_lines(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(step_block(1, pad=0) + step_block(2, pad=0))
    rewritten = [json.loads(line) for line in step_block(2, pad=0).splitlines()]
    for row in rewritten:
        row["completion"] = "after resume"
    with open(path, "a") as fh:
        for row in rewritten:  # a writer with another key order: the step is not the first key
            fh.write(json.dumps({"group": row["group"], **row}) + "\n")
        fh.write("not json at all\n")
    index = RolloutIndex(path)
    index.refresh()
    assert [s for s, _ in index.steps()] == [1, 2]
    assert {r["completion"] for r in index.records(2)} == {"after resume"}  # the later span wins
    assert index.unreadable_lines == 1
    path.write_bytes(step_block(7, pad=0))  # a new run in the same folder: smaller file, new index
    assert [s for s, _ in index.steps()] == [7]


def test_search_stops_early_and_continues(big_log):
    index = RolloutIndex(big_log)
    first = index.search("ANSWER 5-2", limit=3)
    assert [(h["step"], h["group"]) for h in first["hits"]] == [(1, 5), (2, 5), (3, 5)]
    assert "completion: " in first["hits"][0]["snippet"] and first["next_step"] == 4
    more = index.search("answer 5-2", limit=2, from_step=first["next_step"])
    assert [h["step"] for h in more["hits"]] == [4, 5]
    assert index.search("step", limit=5)["hits"] == []  # keys are not text: no false hits
    assert index.search("zzz-not-there")["next_step"] is None


def test_server_pages_a_large_run(big_log):
    server = DashboardServer([str(big_log.parent.parent)], port=0).start()
    try:

        def get(path):
            with urllib.request.urlopen(server.url + path, timeout=60) as res:
                return json.loads(res.read())

        steps = get("api/run/0/steps")["rollout_steps"]
        assert len(steps) == 240
        started = time.perf_counter()
        rows = get("api/run/0/rollouts?step=240")
        assert time.perf_counter() - started < 5 and len(rows) == GROUPS * K
        assert get("api/run/0/search?q=answer%207-7&limit=1")["hits"][0] == {
            "step": 1,
            "group": 7,
            "prompt_id": "p0007",
            "snippet": "completion: …answer 7-7…",
        }
        with pytest.raises(urllib.error.HTTPError) as err:
            get("api/run/0/rollouts?step=abc")
        assert err.value.code == 400 and "must be an integer" in json.loads(err.value.read())["error"]
    finally:
        server.close()


def test_step_written_twice_in_a_row_keeps_the_later_one(tmp_path):
    """A run killed while logging step 2 and resumed from checkpoint 1 writes step 2 again right
    after the first attempt; the group ids starting over tell the two apart."""
    path = tmp_path / "rollouts.jsonl"
    again = step_block(2, pad=0).replace(b'"completion": "answer', b'"completion": "again')
    path.write_bytes(step_block(1, pad=0) + step_block(2, pad=0)[: 100 * 150].rsplit(b"\n", 1)[0] + b"\n" + again)
    index = RolloutIndex(path)
    assert index.steps() == [(1, GROUPS * K), (2, GROUPS * K)]
    assert all(r["completion"].startswith("again") for r in index.records(2))


def test_report_of_a_large_run_embeds_a_spread_of_steps_within_budget(big_log, tmp_path):
    from grouprl.observe.dashboard.page import write_report

    out = write_report([str(big_log.parent.parent)], tmp_path / "report.html", budget_mb=8)
    html = out.read_text()
    data = json.loads(html.split('id="grouprl-data">', 1)[1].split("</script>", 1)[0])
    run = data["runs"][0]
    embedded = sorted(map(int, run["rollouts"]))
    assert len(run["steps"]["rollout_steps"]) == 240  # every step is listed, ...
    assert embedded[0] == 1 and embedded[-1] == 240 and 4 <= len(embedded) <= 9  # ... whole steps of 4 MiB are in
    gaps = [b - a for a, b in zip(embedded, embedded[1:])]
    assert max(gaps) <= 2 * min(gaps) + 1  # spread over the run, not bunched at the start
    assert all(len(run["rollouts"][str(s)]) == GROUPS * K for s in embedded)
    assert out.stat().st_size < 8 << 20
