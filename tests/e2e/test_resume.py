"""A run resumed from checkpoint-k ends with the same metrics and weights as an uninterrupted one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from safetensors.torch import load_file

from grouprl.cli import main

TIMING = {"step_time", "generation_time", "score_time", "advantage_time", "update_time", "tokens_per_second"}  # clock


def _train(model_dir: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "train",
            "--model_name_or_path",
            str(model_dir),
            "--output_dir",
            str(out),
            "--max_steps",
            "4",
            "--batch_size",
            "4",
            "--num_generations",
            "4",
            "--max_new_tokens",
            "5",
            "--n_eval",
            "8",
            "--learning_rate",
            "1e-3",
            "--num_iterations",
            "2",
            "--seed",
            "7",
            *extra,
        ]
    )


def _metrics(path: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {r["step"]: {k: v for k, v in r.items() if k not in TIMING} for r in rows}


def test_resume_matches_uninterrupted_run(warm_arithmetic_dir, tmp_path):
    tiny_arithmetic_dir = warm_arithmetic_dir
    full, part = tmp_path / "full", tmp_path / "part"
    assert _train(tiny_arithmetic_dir, full) == 0
    # The interrupted run: the same 4-step run (linear LR decay over 4 steps) with a checkpoint every
    # 2 steps, cut back to what a kill right after checkpoint-2 leaves: that checkpoint and 2 metric lines.
    assert _train(tiny_arithmetic_dir, part, "--save_steps", "2") == 0
    shutil.rmtree(part / "checkpoint-4")
    lines = (part / "metrics.jsonl").read_text().splitlines(keepends=True)
    (part / "metrics.jsonl").write_text("".join(lines[:2]))
    ckpt = part / "checkpoint-2"
    for name in ("optimizer.pt", "scheduler.pt", "rng.pt", "trainer_state.json", "model.safetensors"):
        assert (ckpt / name).is_file(), name
    assert json.loads((ckpt / "trainer_state.json").read_text())["data_position"] == 2 * 4
    assert _train(tiny_arithmetic_dir, part, "--resume_from_checkpoint", str(ckpt)) == 0

    want, got = _metrics(full / "metrics.jsonl"), _metrics(part / "metrics.jsonl")
    assert set(got) == {1, 2, 3, 4}
    for step in (3, 4):
        assert got[step].keys() == want[step].keys()
        for key, value in want[step].items():
            assert got[step][key] == value or abs(got[step][key] - value) < 1e-6, (step, key)
    a = load_file(full / "checkpoint-4" / "model.safetensors")
    b = load_file(part / "checkpoint-4" / "model.safetensors")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-6
    # The weights did move, so matching them is not vacuous.
    c = load_file(ckpt / "model.safetensors")
    assert max(float((a[k] - c[k]).abs().max()) for k in a) > 1e-4
    summary = json.loads((part / "summary.json").read_text())
    assert summary["accuracy_before"] is not None and summary["steps"] == 4


def test_resume_rejects_a_dir_that_is_not_a_checkpoint(tiny_arithmetic_dir, tmp_path, capsys):
    assert _train(tiny_arithmetic_dir, tmp_path / "x", "--resume_from_checkpoint", str(tiny_arithmetic_dir)) == 2
    assert "not a grouprl checkpoint" in capsys.readouterr().err
