"""The main job: a bare ``grouprl train`` on SmolLM2-135M-Instruct (materialised from its package,
by name). The fast test runs the same path in 2 small steps; the slow one is the README's command
end to end and asserts the gain the README reports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grouprl.cli import main
from grouprl.models.pretrained import cache_dir
from real_model import SMOLLM2, smollm2_dir  # noqa: F401 - the session fixture


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def cached_smollm2(smollm2_dir) -> Path:
    """The main job names the model, so it must find the fixture's folder in its cache."""
    if smollm2_dir != cache_dir() / SMOLLM2:
        pytest.skip(f"the model cache {cache_dir()} is not writable here; the fixture used {smollm2_dir}")
    return smollm2_dir


def test_the_main_job_in_two_small_steps(cached_smollm2, tmp_path, capsys):
    out = tmp_path / "main"
    assert (
        main(
            [
                "train",
                "--output_dir",
                str(out),
                "--max_steps",
                "2",
                "--batch_size",
                "1",
                "--num_generations",
                "4",
                "--n_eval",
                "6",
                "--completions_print_steps",
                "1",
                "--seed",
                "0",
            ]
        )
        == 0
    )
    shown = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == str(cached_smollm2) and summary["task"] == "arithmetic"
    assert summary["steps"] == 2 and summary["n_eval"] == 6
    for when in ("before", "after"):
        rows = _rows(out / "eval" / f"{when}.jsonl")
        assert len(rows) == 6 and summary[f"eval_{when}"]["n"] == 6
        assert all(re.fullmatch(r"Compute \d\d \+ \d\d\. Reply with only the number\.", r["question"]) for r in rows)
        for r in rows:  # the judge reads the last number of the reply, the accuracy counts it
            numbers = re.findall(r"-?[0-9]+", r["completion"])
            assert r["prediction"] == (numbers[-1] if numbers else None)
            assert r["correct"] == (r["prediction"] == r["ground_truth"])
        assert summary[f"accuracy_{when}"] == sum(r["correct"] for r in rows) / 6
    steps = _rows(out / "metrics.jsonl")
    assert [m["step"] for m in steps] == [1, 2] and all(0 <= m["accuracy"] <= 1 for m in steps)
    rollouts = _rows(out / "rollouts" / "rollouts.jsonl")
    assert len(rollouts) == 8 and all("<|im_start|>user\nCompute " in r["prompt"] for r in rollouts)
    # the terminal shows 2 completions of each step (step 1, then every completions_print_steps = 1)
    assert "step 1: 2 of 4 completions" in shown and "step 2: 2 of 4 completions" in shown
    assert f"grouprl dashboard {out}" in " ".join(shown.split())


@pytest.mark.slow
def test_the_main_job_gains_on_the_real_model(cached_smollm2, tmp_path):
    """The README's `grouprl train`, seed 0: the held-out greedy accuracy (n = 200) rises by at least
    15 points (measured: see README / docs/grpo.md)."""
    out = tmp_path / "main"
    assert main(["train", "--output_dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_eval"] == 200
    assert summary["accuracy_after"] - summary["accuracy_before"] >= 0.15, summary
