"""Non-finite and huge rewards, and non-finite updates, in real training runs (tiny model, 1-2 steps).

A reward of NaN/inf is an error of that sample (counted, named in the log), never a score; a
reward of 1e30 still gives nonzero advantages; a non-finite loss never reaches the optimizer.
"""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file

from run_helpers import rows, train, user_file

VARYING = (
    "import math\ndef fn(completion, ground_truth, **kw):\n"
    "    return {value} if len(completion) % 2 else len(completion) * {scale}\n"
)


def _finite_weights(ckpt) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in load_file(ckpt / "model.safetensors").values())


@pytest.mark.parametrize("value", ["float('nan')", "float('inf')", "-math.inf"])
def test_nonfinite_reward_is_a_sample_error_not_a_score(tiny_arithmetic_dir, tmp_path, caplog, value):
    reward = user_file(tmp_path, "bad_reward.py", VARYING.format(value=value, scale="1.0"))
    out = tmp_path / "run"
    rc = train(tiny_arithmetic_dir, out, "--rewards", f"{reward}:fn", "--max_reward_error_fraction", "1.0")
    assert rc == 0
    metrics = rows(out / "metrics.jsonl")[0]
    records = rows(out / "rollouts" / "rollouts.jsonl")
    bad = [r for r in records if r["reward_errors"]]
    assert 0 < len(bad) < len(records), [r["completion"] for r in records]
    assert metrics["reward_errors"] == len(bad) and all(math.isfinite(r["reward"]) for r in records)
    assert all("non-finite score" in r["reward_errors"][0] and "bad_reward.py:fn" in r["reward_errors"][0] for r in bad)
    assert all(math.isfinite(r["advantage"]) for r in records)
    assert _finite_weights(out / "checkpoint-1")
    assert "non-finite score" in caplog.text  # named in the log


def test_all_samples_nonfinite_stops_the_run_past_the_budget(tiny_arithmetic_dir, tmp_path, capsys):
    reward = user_file(tmp_path, "nan_reward.py", "def fn(completion, ground_truth, **kw):\n    return float('nan')\n")
    out = tmp_path / "run"
    assert train(tiny_arithmetic_dir, out, "--rewards", f"{reward}:fn", "--max_reward_error_fraction", "0.5") == 1
    err = capsys.readouterr().err
    assert "run stopped" in err and "nan_reward.py:fn" in err and "non-finite" in err
    assert not list(out.glob("checkpoint-*"))  # no NaN checkpoint


def test_huge_finite_rewards_still_give_advantages(tiny_arithmetic_dir, tmp_path):
    # Scores 1e39 * length: past float32's range (3.4e38) altogether, and float32 statistics of 1e30
    # already overflow (variance 1e60) so that every advantage was 0.
    reward = user_file(
        tmp_path,
        "huge.py",
        "def fn(completion, ground_truth, **kw):\n    return 1e39 * (len(completion) + (hash(completion) % 3))\n",
    )
    out = tmp_path / "run"
    assert train(tiny_arithmetic_dir, out, "--rewards", f"{reward}:fn") == 0
    records = rows(out / "rollouts" / "rollouts.jsonl")
    advantages = [r["advantage"] for r in records]
    assert all(math.isfinite(a) and abs(a) < 10 for a in advantages)
    groups = {}
    for r in records:
        groups.setdefault(r["group"], []).append(r["reward"])
    varied = [g for g, rs in groups.items() if len(set(rs)) > 1]
    assert varied, groups  # the test is only meaningful when some group's rewards differ
    assert any(abs(r["advantage"]) > 0.1 for r in records if r["group"] in varied)
    assert _finite_weights(out / "checkpoint-1")


# A loss from a file whose terms are NaN: the update sees a non-finite loss. (A NaN *advantage* no
# longer gets that far: the advantage phase refuses an estimator's non-finite output, exit 2.)
NAN_LOSS = "def nan_loss(logps, old_logps, advantages, mask):\n    return logps * float('nan')\n"


def test_nonfinite_loss_skips_the_update_and_weights_stay(tiny_arithmetic_dir, tmp_path, caplog):
    loss = user_file(tmp_path, "nan_loss.py", NAN_LOSS)
    out = tmp_path / "run"
    assert (
        train(
            tiny_arithmetic_dir, out, "--loss", f"{loss}:nan_loss", "--max_steps", "2", "--max_nonfinite_updates", "5"
        )
        == 0
    )
    metrics = rows(out / "metrics.jsonl")
    assert [m["skipped_updates"] for m in metrics] == [1.0, 2.0]
    before = load_file(tiny_arithmetic_dir / "model.safetensors")
    after = load_file(out / "checkpoint-2" / "model.safetensors")
    assert all(torch.equal(before[k], after[k]) for k in before)  # no NaN, and no step taken
    assert "skipped an update: non-finite loss" in caplog.text


def test_too_many_nonfinite_updates_stop_the_run(tiny_arithmetic_dir, tmp_path, capsys):
    loss = user_file(tmp_path, "nan_loss.py", NAN_LOSS)
    out = tmp_path / "run"
    assert (
        train(
            tiny_arithmetic_dir, out, "--loss", f"{loss}:nan_loss", "--max_steps", "3", "--max_nonfinite_updates", "1"
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "run stopped" in err and "max_nonfinite_updates=1" in err
    assert not list(out.glob("checkpoint-*"))
