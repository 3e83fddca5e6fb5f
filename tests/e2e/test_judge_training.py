"""Training runs scored by an LLM judge over a real server on 127.0.0.1 that each test starts and stops.

The grader here is tests/judge_standin.py: a scripted judge behind the chat-completions route, in its
own process (it can be SIGKILLed and restarted like any server), whose verdicts are exactly known, so
the tests can check the scores, the cache and resume to the request. The same runs judged by a real
instruct model (SmolLM2-135M-Instruct) are in test_judge_real_model.py (``transformers serve``) and
tests/infra/test_vllm_backend_judge.py (vLLM's structured outputs, the group judge).
"""

from __future__ import annotations

import json

import pytest

from grouprl.cli import main
from judge_standin import cache_lines, grader, metrics, recipe, standin, train_through_a_restart  # noqa: F401 - grader: the fixture

pytest.importorskip("openai")


def judge(name: str, base_url: str, **options) -> dict:
    return {
        "name": name,
        "options": {
            "base_url": base_url,
            "model": "grader",
            "concurrency": 4,
            "timeout": 10,
            "backoff_seconds": 0.2,
            **options,
        },
    }


def test_pointwise_judge_run_and_resume_pays_nothing_twice(tiny_arithmetic_dir, grader, tmp_path):
    out = tmp_path / "run"
    cfg = recipe(tmp_path / "r.yaml", judge("judge", grader.base_url), save_steps=1)
    assert (
        main(
            [
                "train",
                "--config",
                str(cfg),
                "--model_name_or_path",
                str(tiny_arithmetic_dir),
                "--output_dir",
                str(out),
                "--max_steps",
                "3",
            ]
        )
        == 0
    )
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
    assert (
        main(
            [
                "train",
                "--config",
                str(cfg),
                "--model_name_or_path",
                str(tiny_arithmetic_dir),
                "--output_dir",
                str(out),
                "--max_steps",
                "3",
                "--resume_from_checkpoint",
                str(out / "checkpoint-2"),
            ]
        )
        == 0
    )
    step3 = metrics(out)[-1]
    assert step3["step"] == 3 and step3["judge/calls"] == 0
    assert step3["judge/cache_hits"] == rows[2]["judge/calls"] + rows[2]["judge/cache_hits"] > 0  # distinct requests
    assert len((tmp_path / "grader_requests.jsonl").read_text().splitlines()) == before


def test_group_judge_run_one_call_per_group(tiny_arithmetic_dir, grader, tmp_path):
    out = tmp_path / "run"
    cfg = recipe(tmp_path / "r.yaml", judge("group_judge", grader.base_url))
    assert (
        main(
            [
                "train",
                "--config",
                str(cfg),
                "--model_name_or_path",
                str(tiny_arithmetic_dir),
                "--output_dir",
                str(out),
                "--max_steps",
                "2",
            ]
        )
        == 0
    )
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
    cfg = recipe(
        tmp_path / "r.yaml",
        judge("judge", slow.base_url, retries=6, backoff_seconds=0.3),
        max_reward_error_fraction=0.25,
    )
    try:
        train_through_a_restart(slow, cfg, tiny_arithmetic_dir, out, down_s=3.0)
    finally:
        slow.kill()
