"""Pure on-policy distillation learns: with the task reward zero on every sample, the untrained tiny student's
reverse KL to the SFT-warmed tiny teacher (distill/kl_mean, measured on the student's own samples of each step)
falls over 20 steps, with the reward form and with a loss form. Each run takes a few seconds."""

from __future__ import annotations

import json

import pytest

from run_helpers import train, user_file

ZERO = "def zero(completion, ground_truth, **row):\n    return 0.0\n"


@pytest.mark.parametrize("objective", ["reverse_kl_reward", "forward_kl"])
def test_the_reverse_kl_to_the_teacher_falls_under_pure_distillation(
    tmp_path, tiny_arithmetic_dir, warm_arithmetic_dir, objective
):
    zero = user_file(tmp_path, "zero.py", ZERO)
    out = tmp_path / "run"
    rc = train(
        tiny_arithmetic_dir, out, "--teacher", str(warm_arithmetic_dir), "--distill_coef", "1",
        "--distill_objective", objective, "--rewards", f"{zero}:zero", "--max_steps", "20",
        "--learning_rate", "1e-2", "--batch_size", "8", "--num_generations", "4",
    )  # fmt: skip
    assert rc == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["reward"] == 0.0 for r in rows)  # nothing but the teacher to learn from
    kl = [r["distill/kl_mean"] for r in rows]
    first, last = sum(kl[:4]) / 4, sum(kl[-4:]) / 4
    assert last < first - 0.7, kl  # measured: 5.1 -> 3.5 (reward form), 4.8 -> 2.7 (forward KL)
