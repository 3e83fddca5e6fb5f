"""Training runs scored by an LLM judge over a real server on 127.0.0.1 that each test starts and stops.

* The grader with meaningful verdicts is tests/judge_standin.py (a scripted judge behind the
  chat-completions route, in its own process: it can be SIGKILLed and restarted like any server).
* The real model is SmolLM2-135M-Instruct served by ``transformers serve`` (the server the
  ``grouprl generate`` tests use): too small to follow a grading rubric, so its replies are what a
  judge answering garbage looks like to grouprl, from a real instruct model.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from grouprl.cli import main
from judge_standin import ServedProcess, grader, standin  # noqa: F401 - grader: the fixture
from real_model import smollm2_dir  # noqa: F401 - the fixture

pytest.importorskip("openai")


def recipe(path: Path, reward: dict, **extra) -> Path:
    body = {"rewards": [reward], "batch_size": 2, "num_generations": 4, "max_new_tokens": 4,
            "n_eval": 0, "n_train": 40, "device": "cpu", "seed": 3, "learning_rate": 1e-3, **extra}
    path.write_text(yaml.safe_dump(body))
    return path


def judge(name: str, base_url: str, **options) -> dict:
    return {"name": name, "options": {"base_url": base_url, "model": "grader", "concurrency": 4, "timeout": 10,
                                      "backoff_seconds": 0.2, **options}}


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def cache_lines(out: Path, name: str) -> list[dict]:
    path = out / "judge_cache" / name / "responses.rank0.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def test_pointwise_judge_run_and_resume_pays_nothing_twice(tiny_arithmetic_dir, grader, tmp_path):
    out = tmp_path / "run"
    cfg = recipe(tmp_path / "r.yaml", judge("judge", grader.base_url), save_steps=1)
    assert main(["train", "--config", str(cfg), "--model_name_or_path", str(tiny_arithmetic_dir),
                 "--output_dir", str(out), "--max_steps", "3"]) == 0
    rows = metrics(out)
    assert [r["judge/requests"] for r in rows] == [8, 8, 8] and all(r["reward_errors"] == 0 for r in rows)
    sent = sum(r["judge/calls"] for r in rows)
    assert len(cache_lines(out, "judge")) == sent > 0  # every answer kept, none twice
    # The judge's verdicts are the rewards: 0 or 1 (SCORE 0 / 10 mapped to [0, 1]).
    rollouts = [json.loads(line) for line in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()]
    assert {r["rewards"]["judge"] for r in rollouts} <= {0.0, 1.0}
    # Resumed from checkpoint-2, step 3 is regenerated exactly: its judgements come from the cache.
    (out / "metrics.jsonl").write_text("".join(line + "\n" for line in map(json.dumps, rows[:2])))
    before = len((tmp_path / "grader_requests.jsonl").read_text().splitlines())
    assert main(["train", "--config", str(cfg), "--model_name_or_path", str(tiny_arithmetic_dir),
                 "--output_dir", str(out), "--max_steps", "3", "--resume_from_checkpoint",
                 str(out / "checkpoint-2")]) == 0
    step3 = metrics(out)[-1]
    assert step3["step"] == 3 and step3["judge/calls"] == 0
    assert step3["judge/cache_hits"] == rows[2]["judge/calls"] + rows[2]["judge/cache_hits"] > 0  # distinct requests
    assert len((tmp_path / "grader_requests.jsonl").read_text().splitlines()) == before


def test_group_judge_run_one_call_per_group(tiny_arithmetic_dir, grader, tmp_path):
    out = tmp_path / "run"
    cfg = recipe(tmp_path / "r.yaml", judge("group_judge", grader.base_url))
    assert main(["train", "--config", str(cfg), "--model_name_or_path", str(tiny_arithmetic_dir),
                 "--output_dir", str(out), "--max_steps", "2"]) == 0
    rows = metrics(out)
    assert [r["group_judge/requests"] for r in rows] == [2, 2]  # 2 groups of 4 a step: 2 requests
    assert all(r["reward_errors"] == 0 for r in rows)
    assert len(cache_lines(out, "group_judge")) == sum(r["group_judge/calls"] for r in rows)


def test_server_killed_mid_run_and_restarted(tiny_arithmetic_dir, grader, tmp_path):
    """SIGKILL the judge in the middle of step 2's judgements (each answer takes 0.3 s, 4 at a time),
    restart it 3 s later on the same port: the requests in flight and the next ones meet a dead port,
    are retried with backoff, and the run ends within its error budget."""
    grader.kill()
    slow = standin(tmp_path / "slow.log", delay=0.3, port=grader.port)
    slow.start()
    out = tmp_path / "run"
    cfg = recipe(tmp_path / "r.yaml", judge("judge", slow.base_url, retries=6, backoff_seconds=0.3),
                 max_reward_error_fraction=0.25)
    events = []

    def kill_and_restart():
        deadline = time.time() + 120
        while len(cache_lines(out, "judge")) < 10 and time.time() < deadline:
            time.sleep(0.02)
        slow.kill()
        events.append(("killed", len(cache_lines(out, "judge"))))
        time.sleep(3.0)
        slow.start()
        events.append(("restarted", len(cache_lines(out, "judge"))))

    watcher = threading.Thread(target=kill_and_restart, daemon=True)
    watcher.start()
    code = main(["train", "--config", str(cfg), "--model_name_or_path", str(tiny_arithmetic_dir),
                 "--output_dir", str(out), "--max_steps", "4"])
    watcher.join(timeout=60)
    slow.kill()
    assert code == 0 and [e[0] for e in events] == ["killed", "restarted"]
    rows = metrics(out)
    assert len(rows) == 4
    assert sum(r["judge/retries"] for r in rows) > 0  # requests met the dead port and were tried again
    assert all(r["reward_error_fraction"] <= 0.25 for r in rows)
    answered = cache_lines(out, "judge")
    assert len(answered) >= events[0][1] and len({a["key"] for a in answered}) == len(answered)
    assert len(answered) == sum(r["judge/calls"] for r in rows) - sum(r["judge/endpoint_errors"] for r in rows)


def test_real_instruct_model_as_judge_answers_garbage(tiny_arithmetic_dir, smollm2_dir, tmp_path, capsys):
    """SmolLM2-135M-Instruct behind ``transformers serve`` does not follow the rubric's format: every
    reply that holds no score in range is that sample's error; past the budget the run stops, loudly."""
    serve = Path(sys.executable).parent / "transformers"
    srv = ServedProcess([str(serve), "serve", str(smollm2_dir), "--host", "127.0.0.1", "--port", "{port}",
                         "--device", "cpu"], tmp_path / "serve.log")
    srv.start()
    try:
        reward = {"name": "judge", "options": {"base_url": srv.base_url, "model": str(smollm2_dir), "format": "number",
                                               "score_range": [0, 1], "max_tokens": 8, "concurrency": 4,
                                               "timeout": 60, "retries": 1, "cache_dir": str(tmp_path / "cache")}}
        out = tmp_path / "run"
        args = ["--model_name_or_path", str(tiny_arithmetic_dir), "--max_steps", "1", "--batch_size", "1"]
        lenient = recipe(tmp_path / "lenient.yaml", reward, max_reward_error_fraction=1.0)
        assert main(["train", "--config", str(lenient), "--output_dir", str(out), *args]) == 0
        row = metrics(out)[0]
        assert row["judge/requests"] == 4 and row["judge/calls"] + row["judge/cache_hits"] >= 1
        assert row["judge/parse_failures"] == row["reward_errors"] > 0  # its prose is counted, never a 0
        assert row["judge/completion_tokens"] > 0  # transformers serve reports usage
        # The default budget (10 %): the same step (same seed, answers from the cache) stops the run.
        strict = recipe(tmp_path / "strict.yaml", reward)
        code = main(["train", "--config", str(strict), "--output_dir", str(tmp_path / "strict"), *args])
        assert code != 0
    finally:
        srv.kill()
    assert "parse failure" in capsys.readouterr().err
