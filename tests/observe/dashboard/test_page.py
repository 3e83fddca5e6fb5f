"""The offline report carries the policy's text as data, never as template or markup: a completion
holding any of the page's slot names ({{scripts}}, {{data}}, ...), a closing </script> or an HTML
comment comes back out of the report's JSON exactly as it went in, and the page stays whole."""

from __future__ import annotations

import json
import re

from grouprl.cli import main
from grouprl.observe.dashboard.page import SCRIPTS

HOSTILE = [
    "{{scripts}}",
    "{{data}}",
    "{{title}}",
    "{{styles}}",
    "{{ scripts }}",
    "{{scripts}}{{data}}",
    "</script><script>alert(1)</script>",
    "<!-- {{data}}",
    "\u2028\u2029",
    "${x} `y` \\u003c",
    "{{unknown}}",
]


def _run_folder(root, name):
    run = root / name
    (run / "rollouts").mkdir(parents=True)
    rows = [
        {
            "step": 1,
            "prompt_id": "p0",
            "group": 0,
            "prompt": f"q {i}",
            "completion": text,
            "reward": 1.0,
            "advantage": 0.0,
        }
        for i, text in enumerate(HOSTILE)
    ]
    (run / "rollouts" / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 1.0, "note": "{{scripts}}"}) + "\n")
    (run / "config.json").write_text(json.dumps({"logging": {"run_name": "{{data}}"}}))
    return run


def test_template_tokens_in_the_data_never_reach_the_template(tmp_path, capsys):
    runs = [_run_folder(tmp_path, "run {{scripts}}"), _run_folder(tmp_path, "plain")]
    out = tmp_path / "report.html"
    assert main(["report", *map(str, runs), "--out", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    for name in SCRIPTS:  # every script inlined exactly once
        assert html.count(f"/* {name} */") == 1, name
    assert "<title>grouprl report: run {{scripts}}, plain</title>" in html  # the name as text, not a slot
    blocks = re.findall(r'<script type="application/json" id="grouprl-data">(.*?)</script>', html, re.S)
    assert len(blocks) == 1  # no completion closed the data element early
    data = json.loads(blocks[0])
    for run in data["runs"]:
        completions = [r["completion"] for r in run["rollouts"]["1"]]
        assert completions == HOSTILE
        assert run["metrics"][0]["note"] == "{{scripts}}"
    assert data["runs"][0]["overview"]["name"] == "run {{scripts}}"
