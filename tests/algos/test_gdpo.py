"""Reward parts reach the estimators that declare ``parts``; ``gdpo`` normalises each reward in its group."""

from __future__ import annotations

import statistics

import pytest
import torch

from grouprl.algos.advantages import EPS, RewardParts, get_estimator, run_estimator


def test_gdpo_by_hand():
    """Two rewards on very different scales, two groups of three."""
    correct = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    length = [30.0, 10.0, 20.0, 5.0, 5.0, 5.0]  # the second group has no length spread
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    parts = RewardParts(
        {"correct": torch.tensor(correct), "length": torch.tensor(length)}, {"correct": 0.5, "length": 0.5}
    )
    scores = torch.tensor([0.5 * c + 0.5 * n for c, n in zip(correct, length)])

    def norm(values, members):
        mean = statistics.fmean(values[i] for i in members)
        std = statistics.stdev(values[i] for i in members)
        return [(values[i] - mean) / (std + EPS) for i in members]

    summed = []
    for members in ([0, 1, 2], [3, 4, 5]):
        summed += [0.5 * a + 0.5 * b for a, b in zip(norm(correct, members), norm(length, members))]
    mean, std = statistics.fmean(summed), statistics.stdev(summed)
    expected = [(v - mean) / (std + EPS) for v in summed]
    got = run_estimator(get_estimator("gdpo"), scores, groups, parts=parts)
    assert got.tolist() == pytest.approx(expected, rel=1e-5)
    # the plain sum lets length decide group 0's order; gdpo gives the one correct answer the top advantage
    plain = run_estimator(get_estimator("grpo"), scores, groups)
    assert int(plain[:3].argmax()) == 0 and int(got[:3].argmax()) == 0
    assert float(got[1]) < float(got[2]) and float(plain[2]) > float(plain[1])
    assert run_estimator(get_estimator("gdpo"), scores, groups, parts=parts, batch_norm=False)[
        3:
    ].tolist() == pytest.approx([0.5 * v for v in norm(correct, [3, 4, 5])], rel=1e-5)


def test_gdpo_missing_scores_and_missing_parts():
    nan = float("nan")
    parts = RewardParts({"a": torch.tensor([1.0, 0.0, nan, nan])}, {"a": 1.0})
    got = run_estimator(get_estimator("gdpo"), torch.zeros(4), torch.tensor([0, 0, 1, 1]), parts=parts)
    assert got[2:].tolist() == [0.0, 0.0] and float(got[0]) > 0 > float(got[1])  # no reward at all: 0
    with pytest.raises(ValueError, match="'gdpo' takes each reward's part"):
        run_estimator(get_estimator("gdpo"), torch.zeros(4), torch.tensor([0, 0, 1, 1]))
    assert get_estimator("gdpo").options == ("epsilon", "batch_norm") and get_estimator("gdpo").wants_parts


def test_a_user_estimator_sees_each_reward_through_the_trainer(tiny_arithmetic_dir, tmp_path):
    from grouprl.models.loading import load_policy
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task
    from grouprl.train.trainer import Trainer

    path = tmp_path / "mine.py"
    path.write_text(
        "SEEN = []\n"
        "def per_reward(scores, group_ids, parts, shift=0.0):\n"
        "    SEEN.append(parts)\n"
        "    return scores - scores.mean() + shift\n"
    )
    cfg = build_config(
        None,
        {
            "output_dir": str(tmp_path / "run"),
            "batch_size": 2,
            "num_generations": 2,
            "max_new_tokens": 3,
            "n_eval": 0,
            "n_train": 10,
            "device": "cpu",
            "advantage": f"{path}:per_reward",
            "advantage_options": {"shift": 0.5},
            "rewards": [{"name": "arithmetic_exact", "weight": 3.0}, {"name": "length"}],
        },
        environ={},
    )
    policy = load_policy(cfg.model, str(tiny_arithmetic_dir), torch.device("cpu"), need_reference=False)
    trainer = Trainer(cfg, policy, load_task(cfg))
    record = trainer.train_step()
    (parts,) = trainer.estimator.fn.__globals__["SEEN"]
    assert set(parts.scores) == {"arithmetic_exact", "length"}
    assert parts.weights == pytest.approx({"arithmetic_exact": 0.75, "length": 0.25})
    assert parts.scores["arithmetic_exact"].tolist() == [v.parts["arithmetic_exact"] for v in record.scores.verdicts]
