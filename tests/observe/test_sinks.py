"""--report_to trackio / tensorboard: real local files that their own readers read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grouprl.config import ConfigError
from grouprl.run_config import build_config
from grouprl.observe.sinks import MetricsSink

SRC = Path(__file__).resolve().parents[2] / "src"
METRICS = [
    {"reward": 0.25, "loss": -0.5, "rewards/accuracy/mean": 0.2},
    {"reward": 0.5, "loss": -0.25, "rewards/accuracy/mean": 0.4},
    {"reward": 0.75, "loss": 0.125, "rewards/accuracy/mean": 0.6},
]


def test_tensorboard_event_files_read_back(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = MetricsSink(str(tmp_path), "tensorboard", config={"train": {"max_steps": 3}})
    for step, metrics in enumerate(METRICS, start=1):
        sink.log(step, metrics)
    sink.summary({"accuracy_after": 0.625, "task": "arithmetic"})
    sink.close()

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert {"reward", "loss", "rewards/accuracy/mean", "summary/accuracy_after"} <= set(scalars)
    assert [(e.step, e.value) for e in events.Scalars("reward")] == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert [(e.step, e.value) for e in events.Scalars("summary/accuracy_after")] == [(3, 0.625)]
    assert "max_steps" in events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    # metrics.jsonl is written as before, beside the tracker
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[2]["loss"] == 0.125


def test_trackio_database_read_back(tmp_path):
    """trackio reads TRACKIO_DIR when it is imported, so the run goes in a fresh interpreter
    pointed at this test's folder (never the developer's ~/.cache)."""
    pytest.importorskip("trackio")
    script = textwrap.dedent(f"""
        import json
        from grouprl.observe.sinks import MetricsSink
        sink = MetricsSink({str(tmp_path / "run")!r}, "trackio", "grouprl-test", "run-a", {{"max_steps": 3}})
        for step, metrics in enumerate({METRICS!r}, start=1):
            sink.log(step, metrics)
        sink.summary({{"accuracy_after": 0.625, "task": "arithmetic"}})
        sink.close()
        from trackio.sqlite_storage import SQLiteStorage
        print("LOGS " + json.dumps(SQLiteStorage.get_logs("grouprl-test", "run-a"), default=str))
        print("RUNS " + json.dumps(SQLiteStorage.get_runs("grouprl-test")))
    """)
    env = {
        **os.environ,
        "TRACKIO_DIR": str(tmp_path / "trackio"),
        "PYTHONPATH": str(SRC),
        "HF_HUB_OFFLINE": "1",
        "TRACKIO_PROJECT": "",
    }
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = {
        line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
        for line in done.stdout.splitlines()
        if line.startswith(("LOGS ", "RUNS "))
    }
    assert lines["RUNS"] == ["run-a"]
    by_step = {}
    for row in lines["LOGS"]:
        by_step.setdefault(row["step"], {}).update(row)
    assert [by_step[s]["reward"] for s in (1, 2, 3)] == [0.25, 0.5, 0.75]
    assert by_step[3]["summary/accuracy_after"] == 0.625
    assert (tmp_path / "trackio" / "grouprl-test.db").is_file()  # the local store, nothing uploaded


def test_report_to_names_the_choices():
    assert build_config(None, {"report_to": "tensorboard"}, environ={}).logging.report_to == "tensorboard"
    with pytest.raises(ConfigError, match="report_to"):
        build_config(None, {"report_to": "mlflow"}, environ={})
    with pytest.raises(ValueError, match="expected one of none, wandb, trackio, tensorboard"):
        MetricsSink("/nonexistent-never-created", "mlflow")


def test_metrics_jsonl_is_strict_json_and_counts_non_finite_values(tmp_path):
    import json as strict_json

    from grouprl.observe.sinks import MetricsSink

    sink = MetricsSink(str(tmp_path), report_to="none", logging_steps=100)
    sink.log(1, {"reward": 1.0, "reward_std": float("inf"), "loss": float("nan")})
    sink.log(2, {"reward": 0.5})
    sink.close()

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    lines = [
        strict_json.loads(line, parse_constant=refuse) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ]
    assert lines[0] == {"step": 1, "reward": 1.0, "reward_std": None, "loss": None, "nonfinite_metrics": 2.0}
    assert lines[1] == {"step": 2, "reward": 0.5}


def test_a_score_of_insane_magnitude_is_an_error_not_a_reward():
    from grouprl.rewards.guard import MAX_ABS_SCORE, finite_score

    assert finite_score("r", 1e300)[0] is None and "beyond" in finite_score("r", 1e300)[1]
    assert finite_score("r", -1e300)[0] is None
    assert finite_score("r", MAX_ABS_SCORE) == (MAX_ABS_SCORE, None)
