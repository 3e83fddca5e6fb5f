"""GridWorld: a FrozenLake-style text map, generated from the reset seed.

Map cells: ``S`` start, ``G`` goal, ``H`` hole, ``F`` frozen floor; the agent is drawn as ``P``.
Every generated map has a path from ``S`` to ``G`` (checked by BFS; otherwise the map is
drawn again from the same seeded RNG), so the same seed always gives the same map.

Actions are ``up``/``down``/``left``/``right`` (a ``<action>up</action>`` tagged form is
accepted too). With ``slippery = p`` a move goes, with probability ``p``, to one of the two
perpendicular directions instead; that draw comes from an RNG seeded from the reset seed, so
a fixed action sequence always gives the same trajectory. Walking into the edge of the map
leaves the agent in place. Reward: 1.0 on reaching the goal (done), 0.0 on falling into a
hole (done), 0.0 otherwise; after ``max_steps`` moves the episode ends (``truncated``).
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

from grouprl.records import Observation, stable_id
from grouprl.tasks.envs.grid_base import ACTIONS, MOVES, GridMoveEnv

PERPENDICULAR = {"up": ("left", "right"), "down": ("left", "right"), "left": ("up", "down"), "right": ("up", "down")}
_MAX_ATTEMPTS = 1000

SYSTEM_PROMPT = (
    "You are an agent on a frozen lake drawn as a grid. Legend: S start, G goal, H hole, F frozen "
    "floor, P you. Reach G without stepping into a hole. The ice may be slippery: a move can slide "
    "you sideways. Each turn answer with exactly one move in the form <action>up</action>, where the "
    "move is one of: up, down, left, right."
)


def bfs_path(grid: list[str], start: tuple[int, int], goal: tuple[int, int]) -> list[str] | None:
    """Shortest action list from ``start`` to ``goal`` avoiding holes (ignoring slipping), or None."""
    size = len(grid)
    previous: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            path: list[str] = []
            while previous[cell] is not None:
                cell, move = previous[cell]  # type: ignore[misc]
                path.append(move)
            return path[::-1]
        for move in ACTIONS:
            dr, dc = MOVES[move]
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in previous and grid[nxt[0]][nxt[1]] != "H":
                previous[nxt] = (cell, move)
                queue.append(nxt)
    return None


def generate_map(size: int, hole_fraction: float, rng: random.Random) -> tuple[list[str], list[str]]:
    """A solvable map and its shortest path, drawn from ``rng`` (redrawn until S reaches G)."""
    cells = [(r, c) for r in range(size) for c in range(size)]
    n_holes = round(hole_fraction * (size * size - 2))
    for _ in range(_MAX_ATTEMPTS):
        start, goal, *holes = rng.sample(cells, 2 + n_holes)
        grid = [["F"] * size for _ in range(size)]
        grid[start[0]][start[1]], grid[goal[0]][goal[1]] = "S", "G"
        for r, c in holes:
            grid[r][c] = "H"
        rows = ["".join(row) for row in grid]
        path = bfs_path(rows, start, goal)
        if path is not None:
            return rows, path
    raise ValueError(
        f"gridworld: no solvable {size}x{size} map with hole_fraction={hole_fraction} after {_MAX_ATTEMPTS} attempts"
    )


class GridWorld(GridMoveEnv):
    """FrozenLake-style environment following the ``reset(seed)`` / ``step(action)`` protocol.

    ``reset(None)`` is the same as ``reset(0)``, so groups are always reproducible.
    After reset, ``shortest_path`` holds the BFS action list from S to G.
    """

    system_prompt, board_name = SYSTEM_PROMPT, "map"

    def __init__(
        self,
        size: int = 4,
        hole_fraction: float = 0.2,
        slippery: float = 0.0,
        max_steps: int | None = None,
        instructions: str | None = None,
    ):
        self.instructions = instructions or self.system_prompt
        if size < 2:
            raise ValueError("gridworld: size must be at least 2")
        if not 0.0 <= slippery <= 1.0:
            raise ValueError("gridworld: slippery must be in [0, 1]")
        self.size, self.hole_fraction, self.slippery = size, hole_fraction, slippery
        self.max_steps = max_steps if max_steps is not None else 2 * size * size
        self.grid: list[str] = []
        self.shortest_path: list[str] = []
        self.map_id = ""
        self.pos = (0, 0)
        self.steps = 0
        self.done = True
        self._slip_rng = random.Random(0)

    # --- protocol ---------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> Observation:
        seed = 0 if seed is None else seed
        self.grid, self.shortest_path = generate_map(
            self.size, self.hole_fraction, random.Random(f"gridworld-map-{seed}")
        )
        self._slip_rng = random.Random(f"gridworld-slip-{seed}")
        self.map_id = stable_id("\n".join(self.grid))
        self.pos = self._find("S")
        self.steps, self.done = 0, False
        return self.observation()

    def expert_action(self) -> str | None:
        """The next move of a shortest path to the goal from here (BFS), if there is one."""
        path = bfs_path(self.grid, self.pos, self.goal)
        return path[0] if path else None

    def _move(self, move: str) -> dict[str, Any]:
        taken, slipped = move, False
        if self.slippery > 0 and self._slip_rng.random() < self.slippery:
            taken, slipped = self._slip_rng.choice(PERPENDICULAR[move]), True
        dr, dc = MOVES[taken]
        r, c = self.pos[0] + dr, self.pos[1] + dc
        if 0 <= r < self.size and 0 <= c < self.size:
            self.pos = (r, c)
        return {"action": move, "moved": taken, "slipped": slipped}

    def _outcome(self) -> str | None:
        cell = self.grid[self.pos[0]][self.pos[1]]
        return "success" if cell == "G" else "fell" if cell == "H" else None

    # --- views ------------------------------------------------------------------------------
    @property
    def goal(self) -> tuple[int, int]:
        """The goal cell (row, column) of the current map."""
        return self._find("G")

    @property
    def anchor_state(self) -> tuple[str, int, int]:
        return (self.map_id, self.pos[0], self.pos[1])

    def render(self) -> str:
        rows = [list(row) for row in self.grid]
        rows[self.pos[0]][self.pos[1]] = "P"
        return "\n".join("".join(row) for row in rows)

    def _find(self, mark: str) -> tuple[int, int]:
        for r, row in enumerate(self.grid):
            if mark in row:
                return (r, row.index(mark))
        raise ValueError(f"gridworld: no {mark!r} on the map")
