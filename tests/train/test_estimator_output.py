"""A user's estimator that returns what no loss can use stops the run at its first batch in one line,
exit 2, naming the estimator, what it returned and what was expected: one value per group instead of
per episode, a matrix, a scalar, a string, NaN or inf, a step-level estimator one value short."""

from __future__ import annotations

import pytest

from run_helpers import train, user_file

ESTIMATORS = """
import torch

def per_group(scores, group_ids):
    return torch.stack([scores[group_ids == g].mean() for g in group_ids.unique()])

def matrix(scores, group_ids):
    return scores.view(-1, 4)

def scalar(scores, group_ids):
    return scores.mean()

def text(scores, group_ids):
    return "advantages"

def nan(scores, group_ids):
    out = scores - scores.mean()
    out[3] = float("nan")
    return out

def inf(scores, group_ids):
    return torch.full_like(scores, float("inf"))

def as_list(scores, group_ids):
    return [float(s) for s in scores - scores.mean()]

def step_level_short(scores, group_ids, steps):
    return steps.rewards[:-1]
"""

CASES = {
    "per_group": "shape (2,)",
    "matrix": "shape (2, 4)",
    "scalar": "shape ()",
    "text": "returned str",
    "nan": "NaN or inf for 1 of 8 episodes (first: episode 3)",
    "inf": "NaN or inf for 8 of 8",
    "step_level_short": "shape (7,) for 8 episodes (8 steps); expected shape (8,), one value per step",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_bad_estimator_output_is_one_line(name, tiny_arithmetic_dir, tmp_path, capsys):
    path = user_file(tmp_path, "estimators.py", ESTIMATORS)
    capsys.readouterr()
    assert train(tiny_arithmetic_dir, tmp_path / "run", "--advantage", f"{path}:{name}") == 2
    printed = capsys.readouterr().err
    err = printed.strip().splitlines()[-1]  # the lines before are the model loading's progress bars
    assert "Traceback" not in printed and "grouprl: error" not in printed.replace(err, ""), printed
    assert err.startswith(f"grouprl: error: advantage estimator '{path}:{name}' returned") and CASES[name] in err, err


def test_a_list_of_finite_values_is_accepted(tiny_arithmetic_dir, tmp_path):
    path = user_file(tmp_path, "estimators.py", ESTIMATORS)
    assert train(tiny_arithmetic_dir, tmp_path / "run", "--advantage", f"{path}:as_list") == 0
