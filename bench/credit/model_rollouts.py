"""The tiny model's own maze episodes, as the step-credit signal study reads them.

A training run's ``rollouts/rollouts.jsonl`` (written by the real rollout path: the runner, the tiny model
generating every move) holds, per episode, its group, its seed, every action and whether it was valid.
Replaying the actions in the recipe's maze gives back every step's cell (the anchor state the runner
recorded) and its true advantage Q*(s, a) - V*(s) with the moves left; an invalid action does not move
the agent, costs the step and is charged the invalid-action penalty as a step reward (the trainer's
default ``invalid_penalty: in_returns``), so its true advantage is -p + gamma V*(s, k-1) - V*(s, k).
"""

from __future__ import annotations

import json
from pathlib import Path

from grouprl.tasks.envs.grid_base import parse_action
from grouprl.tasks.envs.maze import Maze, state_value

from bench.common import ROOT
from bench.credit.measure import Batch, true_advantage

RECIPE = ROOT / "recipes" / "tiny" / "maze_gigpo.yaml"


def recipe_maze() -> tuple[dict, float, float]:
    """The recipe's maze arguments, its gamma and its invalid-action penalty."""
    from grouprl.run_config import build_config

    cfg = build_config(RECIPE, environ={})
    maze = {
        "size": cfg.maze.maze_size,
        "wall_fraction": cfg.maze.maze_wall_fraction,
        "min_path": cfg.maze.maze_min_path,
        "max_steps": cfg.rollout.max_episode_steps,
        "layouts": cfg.maze.maze_layouts,
    }
    return maze, cfg.algorithm.gamma, cfg.rollout.invalid_action_penalty


def replay(record: dict, group: int, batch: Batch, maze: dict, gamma: float, penalty: float) -> None:
    """Append one logged episode's steps to ``batch``, replayed in its maze."""
    env = Maze(**maze)
    env.reset(record["seed"])
    index = len(batch.group)
    batch.group.append(group)
    for action, valid in zip(record["actions"], record["valid"]):
        left = env.max_steps - env.steps
        batch.episode.append(index)
        batch.states.append(env.anchor_state)
        if valid:
            move = parse_action(action)
            batch.true.append(true_advantage(env, move, gamma, left))
            batch.stationary.append(true_advantage(env, move, gamma, None))
            batch.rewards.append(env.step(move).reward)
        else:  # not advanced, one step spent, the penalty as its reward
            here = env.dist.get(env.pos)
            batch.true.append(-penalty + gamma * state_value(here, gamma, left - 1) - state_value(here, gamma, left))
            batch.stationary.append(-penalty + (gamma - 1) * state_value(here, gamma))
            batch.rewards.append(-penalty)
            env.steps += 1
    batch.success.append(env.pos == env.goal)
    if batch.success[-1] != record["correct"]:
        raise ValueError(f"replaying episode {record['episode']} of step {record['step']} did not reproduce it")


def batches(path: Path, steps: range, maze: dict, gamma: float, penalty: float) -> list[Batch]:
    """One batch per training step in ``steps`` of the run's rollouts file (its groups as they were)."""
    by_step: dict[int, list[dict]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record["step"] in steps:
            by_step.setdefault(record["step"], []).append(record)
    out = []
    for step in sorted(by_step):
        batch = Batch()
        for record in by_step[step]:
            replay(record, record["group"], batch, maze, gamma, penalty)
        out.append(batch)
    return out
