"""bench/device/check.py, the GPU check, runs end to end on the CPU at toy sizes (--fast): every part gives
numbers and no error, the JSON and the markdown are written; a part past its time cap is killed and recorded
while the next part still runs (the isolation a lent GPU's run relies on)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.common import child_pythonpath

PARTS = [
    "train_tiny",
    "captured_decode",
    "scoring",
    "lm_head",
    "train_qwen05b",
    "trl_tiny",
    "trl_qwen05b",
    "async_judge",
]


def run_check(out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPRL_") and k != "OUT"}
    env.update(PYTHONPATH=child_pythonpath(keep_caller=False), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run(
        [sys.executable, "-m", "bench.device.check", "--device", "cpu", "--fast", "--out", str(out), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def numbers_in(value) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers_in(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers_in(v)]
    return []


@pytest.fixture(scope="module")
def fast_check(tmp_path_factory):
    out = tmp_path_factory.mktemp("device_check")
    proc = run_check(out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "device_check.json").read_text()), (out / "device_check.md").read_text(), proc.stdout


def test_every_part_gives_numbers_and_no_error(fast_check):
    record, _, stdout = fast_check
    assert list(record["parts"]) == PARTS
    for name, part in record["parts"].items():
        assert not part.get("error"), f"{name}: {part.get('error')}"
        values = numbers_in(part["result"])
        assert values and all(math.isfinite(v) for v in values), name
    assert record["environment"]["device_name"].startswith("cpu")
    assert record["environment"]["versions"]["transformers"] and record["environment"]["torch"]
    assert "device: cpu" in stdout


def test_training_parts_measure_the_same_work_on_both_trainers(fast_check):
    parts = fast_check[0]["parts"]
    for model in ("tiny", "qwen05b"):
        ours, theirs = parts[f"train_{model}"]["result"], parts[f"trl_{model}"]["result"]
        assert (ours["trainer"], theirs["trainer"]) == ("grouprl", "trl")
        for key in ("prompts", "k", "max_new_tokens", "steps_timed"):
            assert ours[key] == theirs[key], (model, key)
        for r in (ours, theirs):
            assert r["median_step_s"] > 0 and r["tokens_per_s"] > 0 and r["peak_rss_mb"] > 0
            assert r["peak_gpu_mb"] is None  # on the CPU: no GPU memory to report
            # random weights score 0 everywhere: grouprl would skip every update, TRL never does
            assert r["updates_skipped"] == 0
        # random weights of the Qwen shape never pick eos: every completion runs to the cap on both sides
        if model == "qwen05b":
            cap = ours["prompts"] * ours["k"] * ours["max_new_tokens"]
            assert ours["mean_completion_tokens_per_step"] == theirs["mean_completion_tokens_per_step"] == cap
    assert set(fast_check[0]["comparison"]) == {"tiny", "qwen05b"}


def test_scoring_and_lm_head_parts_check_what_they_claim(fast_check):
    parts = fast_check[0]["parts"]
    scoring = parts["scoring"]["result"]
    rows = {(r["attention"], r["dtype"], r["layout"]) for r in scoring["rows"]}
    assert len(rows) == 8 and scoring["all_within_tolerance"]
    assert all(r["padded_logp_std"] > 0.05 for r in scoring["rows"])  # the compared values are informative
    head = parts["lm_head"]["result"]
    assert head["completions"] * head["length"] > head["chunk_rows"]  # more rows than one chunk: chunking runs
    assert set(head["variants"]) == {"chunked", "whole"}
    assert head["loss_abs_diff"] < 1e-2  # the same batch, the same loss, up to bf16 rounding


def test_captured_decode_part_times_each_loop_on_each_model(fast_check):
    """On a CPU there is no graph: the default loop and the eager static loop, greedy and sampled, on both models;
    the rows equal to the loop's are counted (token equality itself: tests/rollout/test_static_decode.py)."""
    r = fast_check[0]["parts"]["captured_decode"]["result"]
    assert set(r["models"]) == {"tiny", "qwen05b"}
    for model in r["models"].values():
        paths = model["paths"]
        assert set(paths) == {f"{p} {s}" for p in ("loop", "static") for s in ("greedy", "sampled")}
        for label, p in paths.items():
            assert p["tokens"] > 0 and p["median_ms"] > 0 and p["first_call_ms"] > 0, label
            assert 0.5 <= p["rows_equal_to_loop"] <= 1.0, label
        assert paths["loop greedy"]["rows_equal_to_loop"] == 1.0


def test_async_part_runs_sync_then_async_on_the_same_work(fast_check):
    """Two real `grouprl train` runs against a judge server on 127.0.0.1: the sync one, then the async one (its
    batches one version stale); every update made (random weights score 0: the skip is off)."""
    r = fast_check[0]["parts"]["async_judge"]["result"]
    for mode in ("sync", "async"):
        assert r[mode]["steps"] == r["steps"] and r[mode]["steps_per_s"] > 0, mode
        assert r[mode]["updates_skipped"] == 0, mode
        assert r[mode]["means"]["update_time"] > 0, mode
    assert "async/staleness_mean" not in r["sync"]["means"]
    assert r["async"]["means"]["async/staleness_mean"] > 0  # the async run trained on batches made by older weights
    assert r["sync"]["means"]["score_time"] >= r["judge_delay"]  # the judge's latency was waited for in sync
    assert math.isclose(r["ratio_async_over_sync"], r["async"]["steps_per_s"] / r["sync"]["steps_per_s"])


def test_async_part_keeps_its_logs_and_takes_its_judge_down_at_the_cap(tmp_path):
    """Killed at its cap, the async part leaves its runs' log beside the JSON (the work folder is removed) and no
    judge server behind (it lives in the part's process group)."""
    proc = run_check(tmp_path, "--isolate", "process", "--parts", "async_judge", "--cap", "async_judge=12")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    part = json.loads((tmp_path / "device_check.json").read_text())["parts"]["async_judge"]
    assert "ran past its cap of 12 s" in part["error"]
    pid = part["result"]["judge_pid"]
    assert pid and (tmp_path / "async_judge_server.log").is_file()
    assert (tmp_path / "async_judge_runs.log").is_file()  # opened when the sync run started
    deadline = time.time() + 10
    while time.time() < deadline and _alive(pid):
        time.sleep(0.2)
    assert not _alive(pid), f"the judge server {pid} outlived its part"


def _alive(pid: int) -> bool:
    """A running process (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_markdown_has_every_table(fast_check):
    md = fast_check[1]
    for heading in (
        "# grouprl GPU check: cpu",
        "## Training steps",
        "## Decode loop vs static cache vs captured step",
        "## Grouped vs padded scoring",
        "## One update's scoring",
        "## Asynchronous rollouts",
        "## Parts",
    ):
        assert heading in md
    assert md.count("| ok |") == len(PARTS)


def test_a_part_past_its_cap_is_killed_and_the_next_still_runs(tmp_path):
    proc = run_check(tmp_path, "--isolate", "process", "--parts", "scoring", "train_tiny", "--cap", "scoring=1")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    parts = json.loads((tmp_path / "device_check.json").read_text())["parts"]
    assert "ran past its cap of 1 s and was killed" in parts["scoring"]["error"]
    assert not parts["train_tiny"].get("error") and parts["train_tiny"]["result"]["median_step_s"] > 0
    assert "scoring: FAILED" in proc.stdout and "train_tiny: ok" in proc.stdout


def test_a_bad_cap_is_refused_in_one_line(tmp_path):
    proc = run_check(tmp_path, "--cap", "nosuchpart=3")
    assert proc.returncode == 2 and "--cap nosuchpart=3: expected PART=SECONDS" in proc.stderr


def test_generation_probe_runs_on_cpu(tmp_path):
    """bench/device/generation_probe.py end to end at toy sizes: every path generates the step's rows."""
    from bench.device import generation_probe

    out = tmp_path / "probe.json"
    results = generation_probe.main(
        ["--device", "cpu", "--fast", "--repeats", "1", "--threads", "1", "--profile", "--out", str(out)]
    )
    tiny = results["tiny"]
    assert set(tiny["paths"]) == {
        "loop inverse_cdf",
        "loop multinomial",
        "loop no onednn",
        "captured decode",
        "hf generate",
    }
    for timing in tiny["paths"].values():
        assert timing["tokens"] > 0 and timing["median_ms"] > 0
    assert "decode" in tiny["profile"]
    assert json.loads(out.read_text())["tiny"]["rows"] == tiny["rows"]
