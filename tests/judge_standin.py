"""The scripted judge for tests: the ``grader`` fixture and what the judge training tests share.

The judge itself (a real OpenAI-compatible HTTP server on 127.0.0.1, ``standin``, ``ServedProcess``,
``free_port``) is ``bench/common/judge_standin.py``, which the benchmarks use too; it is re-exported here,
so tests keep ``from judge_standin import standin``.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from bench.common.judge_standin import ServedProcess, free_port, standin  # noqa: F401 - re-exported for tests


@pytest.fixture()
def grader(tmp_path):
    """The scripted judge in its own process; its requests are logged to ``tmp_path/grader_requests.jsonl``."""
    srv = standin(tmp_path / "grader.log", requests_log=tmp_path / "grader_requests.jsonl")
    srv.start()
    yield srv
    srv.kill()


# --- what the judge training tests share (tests/e2e/test_judge_*.py, tests/infra/test_vllm_backend_judge.py)
def recipe(path: Path, reward: dict, **extra) -> Path:
    """A tiny arithmetic run's recipe: 2 prompts x 4 completions a step, no evaluation."""
    import yaml

    body = {
        "rewards": [reward],
        "batch_size": 2,
        "num_generations": 4,
        "max_new_tokens": 4,
        "n_eval": 0,
        "n_train": 40,
        "device": "cpu",
        "seed": 3,
        "learning_rate": 1e-3,
        **extra,
    }
    path.write_text(yaml.safe_dump(body))
    return path


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def cache_lines(out: Path, name: str) -> list[dict]:
    """The judge's answers cached by process 0 of the run in ``out``."""
    path = out / "judge_cache" / name / "responses.rank0.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def train_through_a_restart(
    srv: ServedProcess, cfg: Path, model_dir: Path, out: Path, down_s: float = 0.0, steps: int = 4, name: str = "judge"
) -> int:
    """Train ``steps`` steps of ``cfg``; once 10 judgements are cached (step 2 of 4 at 8 a step), SIGKILL
    ``srv`` and start it again on its port ``down_s`` seconds later; then check that the run survived within
    its error budget and that the cache holds every answer once. Returns how many answers were cached when
    the server died."""
    import yaml

    from grouprl.cli import main

    events: list[tuple[str, int]] = []

    def kill_and_restart():
        deadline = time.time() + 240
        while len(cache_lines(out, name)) < 10 and time.time() < deadline:
            time.sleep(0.02)
        srv.kill()
        events.append(("killed", len(cache_lines(out, name))))
        time.sleep(down_s)
        srv.start()
        events.append(("restarted", len(cache_lines(out, name))))

    watcher = threading.Thread(target=kill_and_restart, daemon=True)
    watcher.start()
    code = main(
        [
            "train",
            "--config",
            str(cfg),
            "--model_name_or_path",
            str(model_dir),
            "--output_dir",
            str(out),
            "--max_steps",
            str(steps),
        ]
    )
    watcher.join(timeout=240)
    assert code == 0 and [e[0] for e in events] == ["killed", "restarted"], (code, events)
    rows = metrics(out)
    assert len(rows) == steps
    assert sum(r[f"{name}/retries"] for r in rows) > 0  # requests met the dead port and were tried again
    budget = yaml.safe_load(cfg.read_text())["max_reward_error_fraction"]
    assert all(r["reward_error_fraction"] <= budget for r in rows)
    answered = cache_lines(out, name)
    assert len(answered) >= events[0][1] and len({a["key"] for a in answered}) == len(answered)
    assert len(answered) == sum(r[f"{name}/calls"] - r[f"{name}/endpoint_errors"] for r in rows)
    return events[0][1]
