"""On-policy distillation through the real CLI and the learner (train/distillation.py): a run with a teacher
finishes and logs the distill metrics; each objective updates a LoRA or full student; bad teachers are one
line (exit 2) before any training; an unset teacher is refused."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from grouprl.config import ConfigError
from grouprl.models.loading import load_policy
from grouprl.models.tiny import init_tiny
from grouprl.policy.scoring import pack
from grouprl.run_config import build_config
from grouprl.train.learner import Learner
from grouprl.train.step_samples import StepSamples
from run_helpers import train

DISTILL_METRICS = ("distill/teacher_time", "distill/teacher_memory_mb", "distill/kl_mean")


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_a_run_with_a_teacher_finishes_and_logs_the_distill_metrics(tmp_path, tiny_arithmetic_dir, warm_arithmetic_dir):
    out = tmp_path / "run"
    rc = train(
        tiny_arithmetic_dir, out, "--teacher", str(warm_arithmetic_dir), "--distill_coef", "1.0", "--max_steps", "2"
    )
    assert rc == 0
    rows = _metrics(out)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert all(math.isfinite(row[k]) for k in DISTILL_METRICS), row
        assert row["distill/kl_mean"] > 0  # the untrained student is far from the SFT-warmed teacher
        assert "distill/reward_mean" in row  # the default objective: the reverse-KL reward


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("grouprl: error: "), err
    return err


def test_a_teacher_with_another_tokenizer_is_one_line_before_training(tmp_path, tiny_arithmetic_dir, capsys):
    other = init_tiny("abcdef xyz", tmp_path / "other", hidden=32, layers=1, heads=4)
    out = tmp_path / "run"
    assert train(tiny_arithmetic_dir, out, "--teacher", str(other), "--distill_coef", "1") == 2
    err = _one_line(capsys)
    assert str(other) in err and str(tiny_arithmetic_dir) in err and "tokenizer" in err
    assert not (out / "metrics.jsonl").exists()


def test_a_missing_teacher_is_one_line_before_training(tmp_path, tiny_arithmetic_dir, capsys):
    out, missing = tmp_path / "run", tmp_path / "no_such_teacher"
    assert train(tiny_arithmetic_dir, out, "--teacher", str(missing), "--distill_coef", "1") == 2
    assert f"{missing} does not exist" in _one_line(capsys)
    assert not (out / "metrics.jsonl").exists()


def _cfg(tmp_path, **cli):
    base = {"task": "arithmetic", "output_dir": str(tmp_path), "device": "cpu", "max_new_tokens": 4}
    return build_config(None, {**base, **cli}, environ={})


def test_distill_coef_without_a_teacher_and_an_unknown_objective_are_refused(tmp_path, tiny_arithmetic_dir):
    policy = load_policy(_cfg(tmp_path).model, str(tiny_arithmetic_dir), torch.device("cpu"), need_reference=False)
    with pytest.raises(ConfigError, match="needs a teacher"):
        Learner(_cfg(tmp_path, distill_coef=1.0), policy)
    with pytest.raises(ConfigError, match="distill_objective"):
        Learner(_cfg(tmp_path, distill_coef=1.0, teacher=str(tiny_arithmetic_dir), distill_objective="nope"), policy)
    with pytest.raises(ValueError, match="not both"):
        _cfg(tmp_path, teacher="a", teacher_endpoint="http://127.0.0.1:1/v1")


def _samples(tokenizer) -> StepSamples:
    ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompts = [ids("1+2=")] * 2 + [ids("3*3=")] * 2
    completions = [ids("3"), ids("12"), ids("9"), ids("33")]
    return StepSamples(pack(prompts, completions, tokenizer.pad_token_id), torch.zeros(4))


@pytest.mark.parametrize(
    ("objective", "lora", "key"),
    [
        ("reverse_kl_reward", False, "distill/reward_mean"),
        ("k3", True, "distill/loss"),
        ("forward_kl", False, "distill/loss"),
        ("jsd", True, "distill/loss"),
    ],
)
def test_each_objective_moves_the_student_with_zero_task_advantages(
    tmp_path, tiny_arithmetic_dir, warm_arithmetic_dir, objective, lora, key
):
    cfg = _cfg(
        tmp_path, teacher=str(warm_arithmetic_dir), distill_coef=1.0, distill_objective=objective, use_peft=lora,
        lora_target_modules=["q_proj", "v_proj"], distill_top_k=5, learning_rate=1e-2,
    )  # fmt: skip
    policy = load_policy(cfg.model, str(tiny_arithmetic_dir), torch.device("cpu"), need_reference=False)
    learner = Learner(cfg, policy)
    before = [p.detach().clone() for p in policy.model.parameters() if p.requires_grad]
    stats = learner.update(_samples(policy.tokenizer))
    assert "skipped_zero_advantage" not in stats  # the teacher's signal is something to learn
    assert stats["grad_norm"] > 0 and all(math.isfinite(stats[k]) for k in (key, *DISTILL_METRICS))
    after = [p for p in policy.model.parameters() if p.requires_grad]
    assert any(not torch.equal(a, b) for a, b in zip(before, after))


def test_a_resumed_distillation_run_matches_the_uninterrupted_one(tmp_path, tiny_arithmetic_dir, warm_arithmetic_dir):
    """Nothing of the teacher is saved: the resumed run reloads it from the config and goes on identically."""
    flags = (
        "--teacher",
        str(warm_arithmetic_dir),
        "--distill_coef",
        "1",
        "--max_steps",
        "4",
        "--learning_rate",
        "1e-2",
    )
    full, part = tmp_path / "full", tmp_path / "part"
    assert train(tiny_arithmetic_dir, full, *flags) == 0
    assert train(tiny_arithmetic_dir, part, *flags, "--save_steps", "2") == 0
    ckpt = part / "checkpoint-2"
    assert not any("teacher" in p.name for p in ckpt.iterdir())
    lines = (part / "metrics.jsonl").read_text().splitlines(keepends=True)
    (part / "metrics.jsonl").write_text("".join(lines[:2]))
    assert train(tiny_arithmetic_dir, part, *flags, "--resume_from_checkpoint", str(ckpt)) == 0
    want, got = _metrics(full), {r["step"]: r for r in _metrics(part)}
    for row in want[2:]:
        for key in ("distill/kl_mean", "distill/reward_mean", "loss", "reward"):
            assert abs(got[row["step"]][key] - row[key]) < 1e-6, (row["step"], key)
