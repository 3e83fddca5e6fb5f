"""The step-credit signal study's parts (bench/credit/): the rank correlation, the estimators computed by the
project's functions, the replay of logged episodes, and a fast counterpart of the measured table."""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest
import torch

from grouprl.algos.advantages import StepTensors, step_advantages
from grouprl.algos.anchors import anchor_group_ids
from grouprl.tasks.envs.maze import Maze

from bench.credit.measure import Batch, estimates, play_batch, ranks, spearman
from bench.credit.model_rollouts import batches

MAZE = {"size": 6, "wall_fraction": 0.3, "min_path": 10, "max_steps": 30}


def _brute_ranks(x: list[float]) -> list[float]:
    """Rank i = 1 + (values below) + (ties - 1) / 2: the average of the ranks the ties span."""
    return [1 + sum(y < v for y in x) + (sum(y == v for y in x) - 1) / 2 for v in x]


def test_ranks_average_ties_and_spearman_is_pearson_on_ranks():
    rng = random.Random(0)
    x = [rng.choice([0.0, 0.5, 1.0, 2.0]) for _ in range(40)]
    y = [v + rng.gauss(0, 0.7) for v in x]
    assert ranks(np.array(x)).tolist() == _brute_ranks(x)
    expected = float(np.corrcoef(_brute_ranks(x), _brute_ranks(y))[0, 1])
    assert spearman(np.array(x), np.array(y)) == pytest.approx(expected)
    assert spearman(np.arange(5.0), np.arange(5.0) ** 3) == pytest.approx(1.0)
    assert spearman(np.arange(5.0), -np.arange(5.0)) == pytest.approx(-1.0)
    assert spearman(np.zeros(5), np.arange(5.0)) == 0.0  # a constant advantage ranks nothing


def test_estimates_are_the_registered_estimators_on_the_trainers_anchors():
    batch = play_batch([0, 1], 4, 0.5, 0.95, random.Random(1), MAZE)
    found = estimates(batch, 0.95)
    episode, rewards = torch.tensor(batch.episode), torch.tensor(batch.rewards)
    group_ids = torch.tensor(batch.group)
    scores = torch.zeros(len(batch.group)).index_add_(0, episode, rewards)
    anchors = torch.tensor(anchor_group_ids(group_ids[episode].tolist(), batch.states))
    steps = StepTensors(episode=episode, rewards=rewards, anchor=anchors)
    for name, options in (("grpo", {}), ("gigpo w=1", {"gamma": 0.95}), ("gigpo w=0", {"step_advantage_weight": 0})):
        registry_name = name.split()[0]
        expected = step_advantages(registry_name, scores, group_ids, steps, **options)
        assert found[name] == pytest.approx(expected.numpy(), abs=1e-6)
    assert found["gigpo w=2"] == pytest.approx(found["gigpo w=0"] + 2 * found["A_S"], abs=1e-5)


def test_true_advantage_is_zero_for_optimal_moves_and_negative_otherwise():
    batch = play_batch([3], 8, 0.6, 0.95, random.Random(2), MAZE)
    assert max(batch.true) <= 1e-12 and min(batch.true) < 0
    assert sum(batch.success) > 0 and len(batch.true) == len(batch.rewards) == len(batch.states)


def test_replayed_episodes_are_the_logged_ones(tmp_path):
    """An episode played through the environment with an invalid action, logged as the rollout log writes
    it, replays to the same cells, rewards and outcome."""
    maze = {**MAZE, "layouts": 4}
    env = Maze(**maze)
    env.reset(6)
    actions, valid, cells = [], [], []
    for move in itertools.islice(itertools.cycle(["jump", None]), 30):
        cells.append(env.pos)
        action = move or env.expert_action()
        actions.append(action)
        valid.append(move is None)
        if move is None:
            env.step(action)
        else:  # the runner does not step the environment on an invalid action; the step still counts
            env.steps += 1
        if env.pos == env.goal or env.steps >= env.max_steps:
            break
    record = {"step": 1, "episode": "g0-e0", "group": 0, "seed": 6, "actions": actions, "valid": valid}
    record["correct"] = env.pos == env.goal
    (tmp_path / "rollouts.jsonl").write_text(json.dumps(record) + "\n")
    (batch,) = batches(tmp_path / "rollouts.jsonl", range(1, 2), maze, 0.95, 0.1)
    assert [s[1:] for s in batch.states] == cells and batch.success == [True]
    assert batch.rewards[0] == -0.1 and batch.rewards[-1] == 1.0
    assert batch.true[0] < -0.1  # a wasted step: the penalty and one move's discount
    assert all(t == pytest.approx(0.0, abs=1e-12) for t, ok in zip(batch.true, valid) if ok)


def _mean_corr(eps: float, n: int = 4) -> dict[str, float]:
    rng = random.Random(f"test-{eps}")
    sums: dict[str, float] = {}
    for _ in range(n):
        batch: Batch = play_batch(list(range(8)), 8, eps, 0.95, rng, MAZE)
        for name, adv in estimates(batch, 0.95).items():
            sums[name] = sums.get(name, 0.0) + spearman(adv, np.array(batch.true)) / n
    return sums


def test_step_advantage_ranks_steps_by_their_true_advantage_and_grpo_barely_does():
    """The measured table (20 batches, G = 8): eps 0.3: A_S +0.295 +- 0.005, GRPO +0.016 +- 0.004;
    eps 0.6: A_S +0.164 +- 0.004, GiGPO w=1 +0.128, GRPO +0.085 +- 0.003. Four batches, with margin."""
    near = _mean_corr(0.3)
    assert near["A_S"] > 0.2 and near["grpo"] < 0.06 and near["gigpo w=1"] > near["grpo"] + 0.15
    mid = _mean_corr(0.6)
    assert mid["A_S"] > mid["gigpo w=1"] > mid["grpo"] > 0.03 and mid["A_S"] > mid["grpo"] + 0.04
