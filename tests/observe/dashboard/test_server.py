"""The live server answers every route over a damaged rollouts.jsonl: a corrupt line (torn JSON, a
non-UTF-8 byte, nesting past the parser's depth, a JSON value that is no object, a step written as
3.0) is skipped and counted, never a dropped connection."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from grouprl.observe.dashboard.server import DashboardServer

BAD = [
    b'{"step": 1, "prompt_id": "p0", "group": 0, "completion": "needle torn',
    b'{"step": 1, "prompt_id": "p0", "group": 1, "completion": "needle \xff\xfe"}',
    b'{"step": 1, "group": 2, "completion": "needle", "x": ' + b"[" * 100000 + b"]" * 100000 + b"}",
    b'["needle", {"step": 1}]',
    b'"needle"',
    b"needle plain text",
]


def _row(step, group, text):
    return json.dumps(
        {"step": step, "prompt_id": f"p{group}", "group": group, "prompt": "q", "completion": text, "reward": 0.5}
    ).encode()


@pytest.fixture()
def server(tmp_path):
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    lines = [
        _row(1, 0, "a needle here"),
        *BAD,
        _row(2, 0, "another needle"),
        b'{"step": 3.0, "prompt_id": "p5", "group": 5, "completion": "needle from pandas"}',
    ]
    (run / "rollouts" / "rollouts.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    (run / "metrics.jsonl").write_bytes(b'{"step": 1, "reward": 0.5}\n\xff\xfe broken\n{"step": 2, "reward": 1}\n')
    srv = DashboardServer([str(run)], port=0).start()
    yield srv
    srv.close()


def _get(server, path):
    with urllib.request.urlopen(server.url.rstrip("/") + path, timeout=30) as response:
        return response.status, json.loads(response.read())


def test_search_skips_and_counts_corrupt_lines(server):
    status, found = _get(server, "/api/run/0/search?q=needle")
    assert status == 200
    assert [(h["step"], h["group"]) for h in found["hits"]] == [(1, 0), (2, 0), (3, 5)]
    assert found["skipped_lines"] == 3  # the three broken lines the index filed under step 1
    assert found["next_step"] is None


@pytest.mark.parametrize(
    "route",
    [
        "overview",
        "metrics",
        "steps",
        "rollouts?step=1",
        "rollouts?step=3",
        "trajectories?step=1",
        "eval",
        "search?q=%FF",
        "search?q=" + "x" * 5000,
    ],
)
def test_every_route_answers(server, route):
    status, body = _get(server, f"/api/run/0/{route}")
    assert status == 200 and body is not None


def test_a_bad_parameter_is_a_400_not_a_hangup(server):
    with pytest.raises(urllib.error.HTTPError) as err:
        _get(server, "/api/run/0/rollouts?step=x")
    assert err.value.code == 400
