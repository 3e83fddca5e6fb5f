"""The maze: seeded far goals, walls that keep the agent in place, exact optimal values (checked against
value iteration and against the project's discounted returns), anchors on equal cells, the coordinates
view and fixed layouts, and the task as the recipe builds it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from grouprl.algos.advantages import discounted_returns
from grouprl.algos.anchors import anchor_group_ids
from grouprl.tasks.envs.grid_base import ACTIONS
from grouprl.tasks.envs.maze import Maze, action_value, distances, next_cell, state_value

RECIPE = Path(__file__).resolve().parents[3] / "recipes" / "tiny" / "maze_gigpo.yaml"


def test_generation_is_seeded_and_the_goal_is_far():
    maps = set()
    for seed in range(40):
        a, b = Maze(), Maze()
        a.reset(seed), b.reset(seed)
        assert (a.grid, a.start, a.goal) == (b.grid, b.start, b.goal)
        assert a.shortest_path >= 10 and a.shortest_path == distances(a.grid, a.start)[a.goal]
        assert a.grid[a.start[0]][a.start[1]] == "." and a.grid[a.goal[0]][a.goal[1]] == "."
        maps.add(tuple(a.grid))
    assert len(maps) == 40
    big = Maze(size=8, min_path=16)
    big.reset(3)
    assert len(big.grid) == 8 and big.shortest_path >= 16


def test_walls_and_edges_keep_the_agent_in_place():
    env = Maze()
    env.reset(0)
    blocked = [m for m in ACTIONS if next_cell(env.grid, env.pos, m) == env.pos]
    free = [m for m in ACTIONS if m not in blocked]
    assert blocked and free  # a start with a wall or edge beside it and a way out (seed 0's)
    result = env.step(blocked[0])
    assert env.pos == env.start and env.steps == 1 and result.reward == 0.0 and result.info["bumped"]
    assert not result.done and result.observation.anchor_state == (env.map_id, *env.start)


def test_the_expert_arrives_in_shortest_path_moves_with_the_only_reward():
    for seed in range(10):
        env = Maze()
        env.reset(seed)
        rewards = []
        while not env.done:
            rewards.append(env.step(env.expert_action()).reward)
        assert len(rewards) == env.shortest_path and rewards[-1] == 1.0 and sum(rewards) == 1.0
        assert env.pos == env.goal


def _value_iteration(env: Maze, gamma: float, horizon: int) -> list[dict]:
    """V_k(s) for k = 0..horizon moves left, by backward induction over the maze's own transitions."""
    cells = [(r, c) for r in range(env.size) for c in range(env.size) if env.grid[r][c] != "#"]
    values = [{cell: 0.0 for cell in cells}]
    for _ in range(horizon):
        prev = values[-1]
        values.append(
            {
                cell: 0.0
                if cell == env.goal
                else max(
                    1.0 if n == env.goal else gamma * prev[n] for n in (next_cell(env.grid, cell, m) for m in ACTIONS)
                )
                for cell in cells
            }
        )
    return values


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_optimal_values_match_value_iteration(seed):
    gamma, horizon = 0.9, 12
    env = Maze(size=4, wall_fraction=0.25, min_path=4, max_steps=horizon)
    env.reset(seed)
    values = _value_iteration(env, gamma, horizon)
    converged = _value_iteration(env, gamma, 200)[-1]  # the stationary values (no cut)
    for cell in values[-1]:
        d = env.dist.get(cell)
        assert state_value(d, gamma, None) == pytest.approx(converged[cell], abs=1e-9)
        for left in range(1, horizon + 1):
            assert state_value(d, gamma, left) == pytest.approx(values[left][cell], abs=1e-12)
            if cell == env.goal:
                continue
            for move in ACTIONS:
                nxt = next_cell(env.grid, cell, move)
                q = 1.0 if nxt == env.goal else gamma * values[left - 1][nxt]
                assert action_value(env.grid, env.dist, cell, move, gamma, left) == pytest.approx(q, abs=1e-12)


def test_optimal_values_are_the_projects_discounted_returns_of_the_expert():
    gamma = 0.95
    env = Maze(max_steps=30)
    env.reset(5)
    expected, rewards = [], []
    while not env.done:
        expected.append(state_value(env.dist[env.pos], gamma, env.max_steps - env.steps))
        rewards.append(env.step(env.expert_action()).reward)
    returns = discounted_returns(torch.tensor(rewards), torch.zeros(len(rewards), dtype=torch.long), gamma)
    assert returns.tolist() == pytest.approx(expected)


def test_values_account_for_the_cut():
    assert state_value(5, 0.9, 4) == 0.0 and state_value(5, 0.9, 5) == pytest.approx(0.9**4)
    assert state_value(None, 0.9) == 0.0 and state_value(0, 0.9) == 0.0


def test_anchor_ids_group_equal_cells_within_a_group():
    states, groups = [], []
    for group, moves in ((0, ["up", "up", "down"]), (0, ["down", "up"]), (1, ["up"])):
        env = Maze()
        env.reset(7)
        for move in moves:
            states.append(env.anchor_state)
            groups.append(group)
            env.step(move)
    ids = anchor_group_ids(groups, states)
    for i in range(len(states)):
        for j in range(len(states)):
            assert (ids[i] == ids[j]) == (groups[i] == groups[j] and states[i] == states[j])
    assert ids[0] == ids[3]  # both episodes of group 0 start in the same cell


def test_coordinates_view_and_fixed_layouts():
    env = Maze(view="coordinates", layouts=4)
    obs = env.reset(9)
    (r, c), (gr, gc) = env.start, env.goal
    assert obs.text == f"Maze 1. At {r},{c}. Goal {gr},{gc}." and "walls unseen" in env.instructions
    drawn = Maze()
    drawn.reset(1)
    assert env.grid == drawn.grid and obs.anchor_state == drawn.observation().anchor_state
    assert "P" in drawn.observation().text and "G" in drawn.render()
    with pytest.raises(ValueError, match="view"):
        Maze(view="ascii")


def test_the_recipe_builds_the_maze_task():
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task

    cfg = build_config(RECIPE, environ={})
    assert cfg.task.task == "maze" and cfg.maze.maze_view == "coordinates" and cfg.maze.maze_layouts == 4
    task = load_task(cfg)
    env = task.env_factory(task.train_rows[5])()
    obs = env.reset(task.seed_of(task.train_rows[5]))
    assert obs.text.startswith("Maze 1. ") and env.max_steps == cfg.rollout.max_episode_steps == 30
    assert env.shortest_path >= cfg.maze.maze_min_path
