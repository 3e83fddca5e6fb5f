"""Maze: a walled grid with a far goal and one sparse reward, whose optimal values are exact.

Built for measuring step credit (docs/step_credit.md): the shortest path from the start to the goal is at
least ``min_path`` moves (10 by default), the only reward is 1.0 on arriving at the goal, and a move
into a wall or the edge leaves the agent in place (a step spent, the same state again), so the
episodes of a group keep meeting the same cells: GiGPO's anchors. The map is drawn from the reset
seed. ``view="map"`` draws it (``#`` a wall, ``.`` floor, ``G`` the goal, ``P`` the agent);
``view="coordinates"`` names the maze and gives the agent's and the goal's cells only, so the walls are
learned, as a tabular agent learns FrozenLake's holes: the short prompt a tiny model can act on.
``layouts=N`` makes seed s play the maze of seed s mod N (0: every seed its own), so a run can
practise a few fixed mazes, and its warm start imitate moves on those same mazes.

Exact values, matching ``algos/advantages.py:discounted_returns`` (R_t = sum_k gamma^(k-t) r_k,
the reward counted on the step that arrives): with d(s) the BFS distance to the goal, an optimal
policy earns V*(s) = gamma^(d(s)-1), and Q*(s, a) = 1 if a arrives, else gamma * V*(s'). The
episode is cut after ``max_steps`` moves, so the exact values depend on the moves left k as well:
V*(s, k) = gamma^(d(s)-1) if d(s) <= k, else 0 (``steps_left=None``: no cut, the stationary values).
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

from grouprl.records import Observation, stable_id
from grouprl.tasks.envs.grid_base import ACTIONS, MOVES, GridMoveEnv

Cell = tuple[int, int]
_MAX_ATTEMPTS = 2000

SYSTEM_PROMPT = "Move P to G. # is a wall. Reply with one move: up, down, left or right."
COORDINATES_PROMPT = "Reach the goal (row,column; walls unseen). Reply up, down, left or right."
VIEWS = ("map", "coordinates")


def next_cell(grid: list[str], cell: Cell, move: str) -> Cell:
    """Where ``move`` takes the agent from ``cell``: a wall or the edge leaves it in place."""
    r, c = cell[0] + MOVES[move][0], cell[1] + MOVES[move][1]
    if 0 <= r < len(grid) and 0 <= c < len(grid[0]) and grid[r][c] != "#":
        return (r, c)
    return cell


def distances(grid: list[str], source: Cell) -> dict[Cell, int]:
    """BFS moves from ``source`` to every reachable open cell (moves are reversible, so this is
    also each cell's distance *to* ``source``)."""
    dist = {source: 0}
    queue = deque([source])
    while queue:
        cell = queue.popleft()
        for move in ACTIONS:
            nxt = next_cell(grid, cell, move)
            if nxt not in dist:
                dist[nxt] = dist[cell] + 1
                queue.append(nxt)
    return dist


def state_value(d: int | None, gamma: float, steps_left: int | None = None) -> float:
    """V*(s) for a cell at distance ``d`` from the goal (None: unreachable), with ``steps_left`` moves
    before the cut (None: no cut). At the goal (d = 0) nothing is left to earn."""
    if d is None or d == 0 or (steps_left is not None and d > steps_left):
        return 0.0
    return gamma ** (d - 1)


def action_value(
    grid: list[str], dist: dict[Cell, int], cell: Cell, move: str, gamma: float, steps_left: int | None = None
) -> float:
    """Q*(s, a): 1 if the move arrives at the goal, else gamma * V*(s') with one move fewer left."""
    nxt = next_cell(grid, cell, move)
    if dist.get(nxt) == 0:
        return 1.0
    left = None if steps_left is None else steps_left - 1
    return gamma * state_value(dist.get(nxt), gamma, left)


def generate_maze(size: int, wall_fraction: float, min_path: int, rng: random.Random) -> tuple[list[str], Cell, Cell]:
    """Walls drawn from ``rng``, then a start and goal at least ``min_path`` moves apart chosen among
    the open cells (the walls are redrawn while no such pair exists)."""
    cells = [(r, c) for r in range(size) for c in range(size)]
    n_walls = round(wall_fraction * size * size)
    for _ in range(_MAX_ATTEMPTS):
        walls = set(rng.sample(cells, n_walls))
        grid = ["".join("#" if (r, c) in walls else "." for c in range(size)) for r in range(size)]
        far = [
            (a, b)
            for a in cells
            if a not in walls
            for b, d in sorted(distances(grid, a).items())
            if d >= min_path and a < b
        ]
        if far:
            start, goal = rng.choice(far)
            if rng.random() < 0.5:  # either end may be the start
                start, goal = goal, start
            return grid, start, goal
    raise ValueError(
        f"maze: no {size}x{size} map with wall_fraction={wall_fraction} has a path of {min_path} moves "
        f"after {_MAX_ATTEMPTS} attempts"
    )


class Maze(GridMoveEnv):
    """The maze of the module docstring on the ``reset(seed)`` / ``step(action)`` protocol.

    ``reset(None)`` is ``reset(0)``. After reset, ``dist`` holds every open cell's BFS distance to
    the goal and ``shortest_path`` its length from the start.
    """

    system_prompt, board_name = SYSTEM_PROMPT, "maze"

    def __init__(
        self,
        size: int = 6,
        wall_fraction: float = 0.3,
        min_path: int = 10,
        max_steps: int | None = None,
        instructions: str | None = None,
        view: str = "map",
        layouts: int = 0,
    ):
        if size < 3 or not 0.0 <= wall_fraction < 1.0 or min_path < 1 or view not in VIEWS:
            raise ValueError(f"maze: size >= 3, 0 <= wall_fraction < 1, min_path >= 1 and view in {VIEWS}")
        self.view, self.layouts = view, layouts
        self.instructions = instructions or (self.system_prompt if view == "map" else COORDINATES_PROMPT)
        self.size, self.wall_fraction, self.min_path = size, wall_fraction, min_path
        self.max_steps = max_steps if max_steps is not None else 2 * min_path
        self.grid: list[str] = []
        self.dist: dict[Cell, int] = {}
        self.map_id, self.seed = "", 0
        self.pos = self.start = self.goal = (0, 0)
        self.steps, self.done = 0, True

    def reset(self, seed: int | None = None) -> Observation:
        seed = 0 if seed is None else seed
        self.seed = seed % self.layouts if self.layouts > 0 else seed  # the maze's own number
        rng = random.Random(f"maze-map-{self.seed}")
        self.grid, self.start, self.goal = generate_maze(self.size, self.wall_fraction, self.min_path, rng)
        self.dist = distances(self.grid, self.goal)
        self.map_id = stable_id("\n".join(self.grid) + f"|{self.goal}")
        self.pos, self.steps, self.done = self.start, 0, False
        return self.observation()

    @property
    def shortest_path(self) -> int:
        return self.dist[self.start]

    def expert_action(self) -> str | None:
        """The first move (in ``ACTIONS`` order) that brings the agent one step closer to the goal."""
        here = self.dist.get(self.pos)
        for move in ACTIONS:
            if here and self.dist.get(next_cell(self.grid, self.pos, move)) == here - 1:
                return move
        return None

    def _move(self, move: str) -> dict[str, Any]:
        before = self.pos
        self.pos = next_cell(self.grid, self.pos, move)
        return {"action": move, "bumped": self.pos == before}

    def _outcome(self) -> str | None:
        return "success" if self.pos == self.goal else None

    @property
    def anchor_state(self) -> tuple[str, int, int]:
        return (self.map_id, self.pos[0], self.pos[1])

    def observation(self) -> Observation:
        if self.view == "map":
            return super().observation()
        (r, c), (gr, gc) = self.pos, self.goal
        text = f"Maze {self.seed}. At {r},{c}. Goal {gr},{gc}."  # row,column; row 0 at the top
        return Observation(text=text, anchor_state=self.anchor_state, admissible_actions=list(ACTIONS))

    def render(self) -> str:
        rows = [list(row) for row in self.grid]
        rows[self.goal[0]][self.goal[1]] = "G"
        rows[self.pos[0]][self.pos[1]] = "P"
        return "\n".join("".join(row) for row in rows)
