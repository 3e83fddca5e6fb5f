"""The step-credit signal's measuring parts: maze rollouts with their true advantages, every estimator's
per-step advantage from the project's own functions, and Spearman's rank correlation between them.

Shared by the signal study (``step_credit_signal.py``, epsilon-soft optimal policies) and the replay of the
tiny model's own episodes (``model_rollouts.py``), and by the tests.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field

import numpy as np
import torch

from grouprl.algos.advantages import StepTensors, gigpo_parts, grpo_advantage
from grouprl.algos.anchors import anchor_group_ids
from grouprl.tasks.envs.grid_base import ACTIONS
from grouprl.tasks.envs.maze import Maze, action_value, next_cell, state_value

WEIGHTS = (0.0, 0.5, 1.0, 2.0)


@dataclass
class Batch:
    """Every step of a batch of episodes, flattened (an episode's steps contiguous, in order)."""

    episode: list[int] = field(default_factory=list)  # per step: its episode's index
    states: list[tuple] = field(default_factory=list)  # per step: the anchor state it acted in
    rewards: list[float] = field(default_factory=list)  # per step: the environment's reward
    true: list[float] = field(default_factory=list)  # per step: Q*(s, a, k) - V*(s, k), k moves left
    stationary: list[float] = field(default_factory=list)  # per step: the same without the cut
    group: list[int] = field(default_factory=list)  # per episode: its group
    success: list[bool] = field(default_factory=list)  # per episode


def true_advantage(env: Maze, move: str, gamma: float, steps_left: int | None) -> float:
    """Q*(s, a) - V*(s) at the agent's cell, with ``steps_left`` moves before the cut (None: no cut)."""
    q = action_value(env.grid, env.dist, env.pos, move, gamma, steps_left)
    return q - state_value(env.dist.get(env.pos), gamma, steps_left)


def eps_soft_move(env: Maze, eps: float, rng: random.Random) -> str:
    """An optimal move (uniform among the moves that bring the agent closer) with probability 1 - eps,
    else a uniform one of the four."""
    if rng.random() < eps:
        return rng.choice(ACTIONS)
    here = env.dist[env.pos]
    return rng.choice([m for m in ACTIONS if env.dist.get(next_cell(env.grid, env.pos, m)) == here - 1])


def play_batch(seeds: list[int], group_size: int, eps: float, gamma: float, rng: random.Random, maze: dict) -> Batch:
    """``group_size`` episodes on each maze seed (a group), played by the eps-soft policy."""
    batch = Batch()
    for g, seed in enumerate(seeds):
        for _ in range(group_size):
            env = Maze(**maze)
            env.reset(seed)
            index = len(batch.group)
            batch.group.append(g)
            while not env.done:
                move = eps_soft_move(env, eps, rng)
                batch.true.append(true_advantage(env, move, gamma, env.max_steps - env.steps))
                batch.stationary.append(true_advantage(env, move, gamma, None))
                batch.episode.append(index)
                batch.states.append(env.anchor_state)
                batch.rewards.append(env.step(move).reward)
            batch.success.append(env.pos == env.goal)
    return batch


def estimates(batch: Batch, gamma: float, weights: tuple[float, ...] = WEIGHTS) -> dict[str, np.ndarray]:
    """Every estimator's per-step advantage on the batch, from the project's own functions."""
    episode = torch.tensor(batch.episode)
    rewards = torch.tensor(batch.rewards, dtype=torch.float32)
    group_ids = torch.tensor(batch.group)
    scores = torch.zeros(len(batch.group)).index_add_(0, episode, rewards)  # R_i = sum of its rewards
    anchors = anchor_group_ids(group_ids[episode].tolist(), batch.states)  # as train/advantages.py groups them
    steps = StepTensors(episode=episode, rewards=rewards, anchor=torch.tensor(anchors))
    out = {"grpo": grpo_advantage(scores, group_ids)[episode].numpy()}
    for w in weights:
        parts = gigpo_parts(scores, group_ids, steps, gamma=gamma, step_advantage_weight=w)
        out[f"gigpo w={w:g}"] = parts.advantage.numpy()
    out["A_S"] = parts.step_advantage.numpy()
    out["_nonsingleton"] = (parts.anchor_size > 1).float().numpy()
    return out


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties given the mean of the ranks they span."""
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    out = np.empty(len(x), dtype=float)
    start = 0
    for end in range(1, len(x) + 1):
        if end == len(x) or sorted_x[end] != sorted_x[start]:
            out[order[start:end]] = (start + end + 1) / 2  # ranks start+1 .. end, averaged
            start = end
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (Pearson's on tie-averaged ranks). A constant side ranks nothing: 0
    (e.g. GRPO's advantage on a batch where every episode succeeded), so such batches count as no signal."""
    rx, ry = ranks(np.asarray(x, dtype=float)), ranks(np.asarray(y, dtype=float))
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error of the finite values (NaN, NaN if none)."""
    kept = [v for v in values if v == v]
    if not kept:
        return float("nan"), float("nan")
    se = statistics.stdev(kept) / len(kept) ** 0.5 if len(kept) > 1 else float("nan")
    return statistics.fmean(kept), se
