"""The shipped GSM8K recipe, end to end for 2 steps with a tiny local model and the local GSM8K copy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import RECIPE
from grouprl import cli
from grouprl.tasks.gsm8k import SYSTEM_PROMPT, load_split

STEPS, PROMPTS, K, N_EVAL, N_TRAIN = 2, 2, 2, 4, 50


@pytest.fixture(scope="module")
def run(tiny_gsm8k_dir, gsm8k_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("recipe") / "run"
    rc = cli.main(
        [
            "train",
            "--config",
            str(RECIPE),
            "--model_name_or_path",
            str(tiny_gsm8k_dir),
            "--dataset_name_or_path",
            str(gsm8k_dir),
            "--max_steps",
            str(STEPS),
            "--output_dir",
            str(out),
            "--n_eval",
            str(N_EVAL),
            "--max_new_tokens",
            "16",
            "--eval_max_new_tokens",
            "16",
            "--batch_size",
            str(PROMPTS),
            "--num_generations",
            str(K),
            "--n_train",
            str(N_TRAIN),
            "--device",
            "cpu",
        ]
    )
    assert rc == 0
    return out


def read_jsonl(path):
    # split on "\n" only: GSM8K text holds U+2028, which str.splitlines() would also split on
    text = Path(path).read_text(encoding="utf-8")
    assert text.endswith("\n")
    return [json.loads(line) for line in text.split("\n")[:-1]]


def test_config_written_merges_recipe_and_flags(run, tiny_gsm8k_dir, gsm8k_dir):
    cfg = json.loads((run / "config.json").read_text())
    # from the recipe
    assert cfg["algorithm"]["beta"] == 0.04 and cfg["algorithm"]["loss_type"] == "grpo"
    assert cfg["train"]["learning_rate"] == 1e-6 and cfg["train"]["gradient_accumulation_steps"] == 4
    assert cfg["task"]["task"] == "gsm8k" and cfg["task"]["rewards"] == ["gsm8k_final"]
    # from the flags
    assert cfg["model"]["model_name_or_path"] == str(tiny_gsm8k_dir)
    assert cfg["task"]["dataset_name_or_path"] == str(gsm8k_dir)
    assert cfg["train"]["max_steps"] == STEPS and cfg["task"]["n_train"] == N_TRAIN
    assert cfg["rollout"]["num_generations"] == K and cfg["rollout"]["batch_size"] == PROMPTS
    assert cfg["eval"]["eval_max_new_tokens"] == 16 and cfg["eval"]["n_eval"] == N_EVAL


def test_summary(run, tiny_gsm8k_dir):
    summary = json.loads((run / "summary.json").read_text())
    assert summary["task"] == "gsm8k"
    assert summary["model"] == str(tiny_gsm8k_dir)
    assert summary["steps"] == STEPS
    for key in ("accuracy_before", "accuracy_after"):
        assert isinstance(summary[key], float) and 0.0 <= summary[key] <= 1.0
    assert summary["n_eval"] == N_EVAL
    assert isinstance(summary["wall_seconds"], (int, float)) and summary["wall_seconds"] > 0
    assert 0 < summary["mean_new_tokens_after"] <= 16
    assert summary["final_checkpoint"] == str(run / f"checkpoint-{STEPS}")
    for key in ("before", "after"):
        rows = read_jsonl(run / "eval" / f"{key}.jsonl")
        assert len(rows) == N_EVAL
        assert rows[0]["question"].startswith("Janet")
        assert all(r["new_tokens"] <= 16 for r in rows)
    assert (run / "reward_curve.png").stat().st_size > 0


def test_metrics(run):
    lines = (run / "metrics.jsonl").read_text().split("\n")[:-1]
    assert len(lines) == STEPS
    metrics = [json.loads(line) for line in lines]
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    required = [
        "reward",
        "frac_reward_zero_std",
        "completions/mean_length",
        "entropy",
        "kl",
        "clip_ratio/low_mean",
        "clip_ratio/high_mean",
        "clip_ratio/region_mean",
        "step_time",
        "tokens_per_second",
        "loss",
        "grad_norm",
        "learning_rate",
        "rewards/gsm8k_final/mean",
    ]
    for m in metrics:
        missing = [k for k in required if k not in m]
        assert not missing, missing
        assert 0.0 <= m["reward"] <= 1.0
        assert m["frac_reward_zero_std"] in (0.0, 0.5, 1.0)  # 2 groups
        assert 0 < m["completions/mean_length"] <= 16
        assert m["entropy"] > 0
        assert m["kl"] >= 0.0
        assert m["step_time"] > 0 and m["tokens_per_second"] > 0
        assert m["learning_rate"] == pytest.approx(1e-6)
        for k in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"):
            assert 0.0 <= m[k] <= 1.0
    # step 1: the policy is still the reference, so the KL is zero
    assert metrics[0]["kl"] == pytest.approx(0.0, abs=1e-6)


def test_rollouts(run):
    records = read_jsonl(run / "rollouts" / "rollouts.jsonl")
    assert len(records) == STEPS * PROMPTS * K
    fields = {
        "step",
        "prompt_id",
        "prompt",
        "completion",
        "prediction",
        "ground_truth",
        "reward",
        "rewards",
        "correct",
        "advantage",
    }
    for r in records:
        assert fields <= set(r), fields - set(r)
        assert SYSTEM_PROMPT in r["prompt"]
        assert r["prompt"].endswith("<|im_start|>assistant\n")
        assert set(r["rewards"]) == {"gsm8k_final"}
        assert r["reward"] == r["rewards"]["gsm8k_final"] and r["reward"] in (0.0, 0.1, 1.0)
        assert isinstance(r["correct"], bool) and r["correct"] == (r["reward"] == 1.0)
        assert isinstance(r["advantage"], float)
        assert isinstance(r["ground_truth"], str) and r["ground_truth"]
    assert [r["step"] for r in records] == [s for s in range(1, STEPS + 1) for _ in range(PROMPTS * K)]
    # each step: PROMPTS groups of K episodes sharing a prompt; advantages centred per group
    for step in range(1, STEPS + 1):
        by_prompt: dict[str, list[dict]] = {}
        for r in records:
            if r["step"] == step:
                by_prompt.setdefault(r["prompt_id"], []).append(r)
        assert sorted(len(v) for v in by_prompt.values()) == [K] * PROMPTS
        for group in by_prompt.values():
            assert len({g["prompt"] for g in group}) == 1
            assert len({g["ground_truth"] for g in group}) == 1
            assert abs(sum(g["advantage"] for g in group)) < 1e-4


def test_rollout_questions_come_from_the_first_n_train_rows(run, gsm8k_dir):
    first = load_split(str(gsm8k_dir), "train")[:N_TRAIN]
    questions = {r["question"] for r in first}
    for r in read_jsonl(run / "rollouts" / "rollouts.jsonl"):
        assert any(q in r["prompt"] for q in questions)


def test_final_checkpoint(run):
    ckpt = run / f"checkpoint-{STEPS}"
    for name in (
        "optimizer.pt",
        "scheduler.pt",
        "rng.pt",
        "trainer_state.json",
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ):
        assert (ckpt / name).is_file(), name
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["step"] == STEPS
    assert state["data_position"] == STEPS * PROMPTS
    assert "eval_before" in state["extra"]
    rng = torch.load(ckpt / "rng.pt", weights_only=False)  # every process's state (here one)
    assert rng["world_size"] == state["world_size"] == 1 and {"python", "numpy", "torch"} <= set(rng["states"][0])
    opt = torch.load(ckpt / "optimizer.pt", weights_only=False)
    assert opt["state"], "AdamW took at least one step"
    # save_steps is 50 in the recipe: no intermediate checkpoint, no temp dir left behind
    assert sorted(p.name for p in run.iterdir() if "checkpoint" in p.name) == [f"checkpoint-{STEPS}"]
