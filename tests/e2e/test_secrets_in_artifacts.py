"""A judge's api_key (and any key/token/secret field) is never written in clear (issue 32, class 6).

A real one-step run judged over a real server on 127.0.0.1 with a recipe that carries an ``api_key``, a
token in ``extra_body`` and a bearer header (and a command line that repeats them), reporting to each tracker (TensorBoard; W&B offline;
trackio into the test's folder). Then every byte the run left (the run folder, the tracker's files), the
dashboard's ``/api/runs`` and the offline report are searched for the secrets: none may hold one.
"""

from __future__ import annotations

import json
import sys
import urllib.request

import pytest

from grouprl.cli import main
from grouprl.observe.dashboard import DashboardServer, write_report
from judge_standin import grader, metrics, recipe  # noqa: F401 - grader: the fixture

REDACTED = "<redacted>"  # grouprl.config.redact.REDACTED
SECRETS = ["sk-test-KEY-4f9a1c", "hf_TOKEN_77b2e0", "sekrit-bearer-5d1"]


def judge_reward(base_url: str) -> dict:
    return {
        "name": "judge",
        "options": {
            "base_url": base_url,
            "model": "grader",
            "api_key": SECRETS[0],
            "extra_body": {"hub_token": SECRETS[1], "note": f"Bearer {SECRETS[2]}"},
        },
    }


def files_holding_secrets(*roots) -> list[str]:
    found = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                found += [f"{path}: {s}" for s in SECRETS if s.encode() in data]
    return found


@pytest.mark.parametrize("report_to", ["tensorboard", "wandb", "trackio"])
def test_no_artifact_holds_a_secret(tiny_arithmetic_dir, grader, tmp_path, monkeypatch, report_to):
    pytest.importorskip({"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}[report_to])
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    out = tmp_path / "run"
    cfg = recipe(tmp_path / "r.yaml", judge_reward(grader.base_url))
    argv = [
        "train",
        "--config",
        str(cfg),
        "--model_name_or_path",
        str(tiny_arithmetic_dir),
        "--output_dir",
        str(out),
        "--max_steps",
        "1",
        "--report_to",
        report_to,
    ]
    # what a tracker may record of the command line (W&B's metadata): a secret typed there as well
    monkeypatch.setattr(sys, "argv", ["grouprl", *argv, "--hub_token", SECRETS[1], f"{{api_key: {SECRETS[0]}}}"])
    assert main(argv) == 0
    assert metrics(out)[0]["judge/requests"] == 8 and metrics(out)[0]["reward_errors"] == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["task"]["rewards"][0]["options"]["api_key"] == REDACTED
    report = write_report([str(out)], tmp_path / "report.html")
    server = DashboardServer([str(out)], port=0).start()
    try:
        with urllib.request.urlopen(server.url.rstrip("/") + "/api/runs", timeout=30) as answer:
            api = answer.read().decode()
    finally:
        server.close()
    assert REDACTED in api and not [s for s in SECRETS if s in api]
    assert not [s for s in SECRETS if s in report.read_text()]
    assert not files_holding_secrets(out, tmp_path / "trackio", tmp_path / "wandb")


def test_an_old_run_folder_is_redacted_when_read(tmp_path):
    """A config.json written before the rule (or by hand) still reaches neither the API nor the report."""
    from grouprl.observe.dashboard import open_runs
    from grouprl.config.redact import redact

    run = tmp_path / "old"
    run.mkdir()
    (run / "config.json").write_text(
        json.dumps({"task": {"task": "arithmetic", "rewards": [judge_reward("x")]}, "hub": {"hub_token": SECRETS[1]}})
    )
    overview = json.dumps(open_runs([str(run)])[0].overview())
    assert not [s for s in SECRETS if s in overview]
    assert redact({"max_new_tokens": 8, "tokenizer": "char", "prompt_tokens": 3}) == {
        "max_new_tokens": 8,
        "tokenizer": "char",
        "prompt_tokens": 3,
    }


def test_a_redacted_key_read_back_is_never_sent(monkeypatch):
    """``grouprl train --config run/config.json`` holds the mark, not the key: the environment's key is used,
    or the run stops naming the option."""
    from grouprl.config import ConfigError
    from grouprl.rewards.learned.judge import api_key_of

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="api_key is '<redacted>'"):
        api_key_of("judge", REDACTED)
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    assert api_key_of("judge", REDACTED) == "from-env" and api_key_of("judge", "mine") == "mine"


def test_an_invalid_recipe_never_echoes_a_key(tmp_path, capsys):
    """The one-line error for a bad recipe value shows the value: its secret fields redacted."""
    cfg = recipe(tmp_path / "r.yaml", {"name": "judge", "options": {"api_key": SECRETS[0]}}, max_new_tokens="many")
    assert main(["train", "--config", str(cfg), "--output_dir", str(tmp_path / "out")]) == 2
    (tmp_path / "s.yaml").write_text(f"task:\n  judge_api_key: {SECRETS[0]}\n")  # a key under a section
    assert main(["train", "--config", str(tmp_path / "s.yaml"), "--output_dir", str(tmp_path / "out")]) == 2
    printed = capsys.readouterr()
    assert not [s for s in SECRETS if s in printed.out + printed.err]
