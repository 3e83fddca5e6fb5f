"""bench/rollouts/async_rollouts.py's parts that decide what it measures, without training: the tool service is a real
HTTP process that answers the calculator after its 0.3 s, and the SmolLM2 judge workload keeps the main
job's batch (2 prompts x 8 completions) with the judge as its only reward; experiments/async_learning.py
reads a finished run back (its resume) with its training curve."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import urllib.request
from pathlib import Path

from grouprl.run_config import build_config

from bench.common import ROOT as REPO, child_pythonpath
from bench.common.judge_standin import ServedProcess, standin
from bench.rollouts import async_rollouts


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tool_service_answers_over_http_after_its_delay(tmp_path):
    service = ServedProcess(
        [sys.executable, "-m", "bench.rollouts.async_rollouts", "--serve-tool", "{port}"],
        tmp_path / "tool.log",
        startup_s=60,
        env={"PYTHONPATH": child_pythonpath()},
    )
    service.start()
    try:
        start = time.perf_counter()
        url = f"http://127.0.0.1:{service.port}/calc?expression=4821%20*%2097"
        with urllib.request.urlopen(url, timeout=10) as reply:
            body = json.loads(reply.read())
        elapsed = time.perf_counter() - start
        with urllib.request.urlopen(f"http://127.0.0.1:{service.port}/calc?expression=4821%20*", timeout=10) as reply:
            bad = json.loads(reply.read())
    finally:
        service.kill()
    assert body == {"value": "467637"}
    assert 0.3 <= elapsed < 3.0
    assert "error" in bad and "value" not in bad


def test_the_smollm2_judge_workload_keeps_the_main_jobs_batch(tmp_path):
    recipe = tmp_path / "judge.yaml"
    recipe.write_text(json.dumps(async_rollouts.smollm2_judge_recipe("http://127.0.0.1:9/v1")))
    cfg = build_config(recipe, {})
    main_job = build_config(REPO / "recipes" / "SmolLM2-135M-Instruct" / "grpo" / "config_arithmetic.yaml", {})
    assert cfg.model.model_name_or_path == "smollm2-135m-instruct"
    assert (cfg.rollout.batch_size, cfg.rollout.num_generations) == (2, 8)
    assert cfg.rollout == main_job.rollout
    assert [r.name for r in cfg.task.rewards] == ["judge"]
    assert cfg.task.rewards[0].options["base_url"] == "http://127.0.0.1:9/v1"


def test_a_finished_learning_run_is_read_back_not_rerun(tmp_path):
    experiment = load(REPO / "experiments" / "async_learning.py")
    out = tmp_path / "sync_0"
    out.mkdir()
    (out / "summary.json").write_text(
        json.dumps({"accuracy_before": 0.27, "accuracy_after": 0.5, "wall_seconds": 130.0})
    )
    (out / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "accuracy": s / 10}) + "\n" for s in (1, 2)))
    (out / "load.json").write_text(json.dumps({"before": [1, 1, 1], "after": [2, 2, 2]}))
    # a model that does not exist: running it would fail, so reading it back is the only way to pass
    result = experiment.run(str(tmp_path / "missing"), out, 0, 20, 200, [])
    assert result["after"] == 0.5 and result["train_accuracy"] == [(1, 0.1), (2, 0.2)]
    assert not (tmp_path / "runs.log").exists()


def test_the_judge_served_one_request_at_a_time_queues_the_others(tmp_path):
    """``--judge-concurrency 1``: the stand-in answers one request at a time, so three sent at once come back
    one delay apart (a concurrent server would answer them together)."""
    import threading

    server = standin(tmp_path / "judge.log", mode="digits", delay=0.3, concurrency=1)
    server.start()
    done: list[float] = []

    def ask():
        body = json.dumps(
            {"model": "grader", "messages": [{"role": "user", "content": "Question: 2+3\n\nResponse:\n5"}]}
        )
        request = urllib.request.Request(
            f"{server.base_url}/chat/completions", data=body.encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert "SCORE: 10" in json.loads(reply.read())["choices"][0]["message"]["content"]
        done.append(time.perf_counter())

    try:
        start = time.perf_counter()
        threads = [threading.Thread(target=ask) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        server.kill()
    assert len(done) == 3
    answered = sorted(t - start for t in done)
    assert answered[2] >= 0.9 - 0.05 and answered[2] - answered[0] >= 0.6 - 0.05, answered
