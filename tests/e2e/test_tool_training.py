"""The tool recipe end to end through ``grouprl train`` (HF backend): conversations, masks, metrics, a
checkpoint that keeps the tool template, and a resumed run that ends where an uninterrupted one does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grouprl.cli import main

pytestmark = pytest.mark.slow  # a tool SFT and three short training runs

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "tiny" / "tool_arithmetic.yaml"
TIMING = {"step_time", "generation_time", "score_time", "advantage_time", "update_time", "tokens_per_second"}


@pytest.fixture(scope="module")
def warm_tool_model(tmp_path_factory):
    """A small tiny model after a short tool SFT: it writes <tool_call> turns, not yet well."""
    import grouprl.tasks  # noqa: F401
    from grouprl.job.tool_sft import tool_sft
    from grouprl.models.tiny import init_tiny
    from grouprl.rollout.runner import episode_settings
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task

    out = tmp_path_factory.mktemp("tool_model")
    cfg = build_config(RECIPE, {"output_dir": str(out)}, environ={})
    task = load_task(cfg)
    tiny = init_tiny(
        task.tokenizer_corpus(),
        out / "tiny",
        hidden=32,
        layers=2,
        heads=2,
        seed=0,
        tokenizer=task.tiny_tokenizer,
        max_positions=task.tiny_max_positions,
    )
    return tool_sft(
        str(tiny),
        task,
        episode_settings(cfg, task),
        out / "sft",
        steps=40,
        learning_rate=3e-3,
        batch_size=8,
        seed=0,
        n_episodes=32,
    )


def _train(model: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "train",
            "--config",
            str(RECIPE),
            "--model_name_or_path",
            str(model),
            "--output_dir",
            str(out),
            "--max_steps",
            "2",
            "--batch_size",
            "2",
            "--num_generations",
            "2",
            "--n_eval",
            "2",
            "--max_tool_calls",
            "2",
            "--seed",
            "5",
            "--device",
            "cpu",
            "--save_trajectories_every",
            "1",
            *extra,
        ]
    )


def _metrics(path: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {r["step"]: {k: v for k, v in r.items() if k not in TIMING} for r in rows}


def test_tool_recipe_trains_and_resumes(warm_tool_model, tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    assert _train(warm_tool_model, full) == 0
    metrics = _metrics(full / "metrics.jsonl")
    assert sorted(metrics) == [1, 2]
    for m in metrics.values():
        assert 0 <= m["tools/invalid_call_rate"] <= 1 and m["samples"] == 4  # one sample per episode
        assert sum(m[f"tools/ended/{r}"] for r in ("answer", "max_tool_calls", "context", "truncated")) == 1
    tokenizer_config = json.loads((full / "checkpoint-2" / "tokenizer_config.json").read_text())
    template = tokenizer_config.get("chat_template") or (full / "checkpoint-2" / "chat_template.jinja").read_text()
    assert "<tool_call>" in template and "<tools>" in template
    rows = [json.loads(line) for line in (full / "trajectories" / "step_000001.jsonl").read_text().splitlines()]
    assert all("tool_results" in r and "anchor_state" in r for r in rows)
    # interrupted after checkpoint-1, resumed: the same metrics at step 2 as the uninterrupted run
    assert _train(warm_tool_model, part, "--save_steps", "1") == 0
    shutil.rmtree(part / "checkpoint-2")
    lines = (part / "metrics.jsonl").read_text().splitlines(keepends=True)
    (part / "metrics.jsonl").write_text(lines[0])
    assert _train(warm_tool_model, part, "--resume_from_checkpoint", str(part / "checkpoint-1")) == 0
    assert _metrics(part / "metrics.jsonl")[2] == pytest.approx(metrics[2], rel=1e-4, abs=1e-6)


def test_tool_recipe_on_two_processes(warm_tool_model, tmp_path):
    """torchrun with 2 processes: each rolls out its group's conversations, advantages on the whole batch,
    each updates on its own episodes (one sequence each); process 0 writes the metrics."""
    from launch import torchrun

    out = tmp_path / "ddp"
    torchrun(
        [
            "-m",
            "grouprl.cli",
            "train",
            "--config",
            str(RECIPE),
            "--model_name_or_path",
            str(warm_tool_model),
            "--output_dir",
            str(out),
            "--max_steps",
            "2",
            "--batch_size",
            "2",
            "--num_generations",
            "2",
            "--n_eval",
            "2",
            "--max_tool_calls",
            "2",
            "--seed",
            "5",
            "--device",
            "cpu",
        ],
        timeout=1200,
    )
    metrics = _metrics(out / "metrics.jsonl")
    assert sorted(metrics) == [1, 2]
    for m in metrics.values():
        assert m["samples"] == 4 and 0 <= m["tools/invalid_call_rate"] <= 1  # the whole batch's episodes
    assert (out / "checkpoint-2").is_dir()
