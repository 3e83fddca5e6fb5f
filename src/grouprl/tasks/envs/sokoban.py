"""Sokoban: small procedurally generated rooms, each checked solvable at generation.

A room is ``size`` x ``size`` with an outer wall and a few random inner walls. Legend:
``#`` wall, ``_`` floor, ``$`` box, ``.`` target, ``*`` box on a target, ``@`` player,
``+`` player on a target. The room is drawn from an RNG seeded from the reset seed and
solved by BFS over (player, boxes) states; an unsolvable room is redrawn, so every room
can be solved and ``solution`` holds a shortest action list.

Actions are ``up``/``down``/``left``/``right`` (``<action>up</action>`` accepted too). Walking
into a wall, or pushing a box into a wall or another box, leaves everything in place (the
move still counts). Reward 1.0 when every box is on a target (done), else 0.0; after
``max_steps`` moves the episode ends (``truncated``).
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

from grouprl.records import Observation, stable_id
from grouprl.tasks.envs.grid_base import ACTIONS, MOVES, GridMoveEnv

Cell = tuple[int, int]
State = tuple[Cell, frozenset]
_MAX_ATTEMPTS = 1000
_MAX_STATES = 200_000

SYSTEM_PROMPT = (
    "You are playing Sokoban. Legend: # wall, _ floor, $ box, . target, * box on a target, @ you, "
    "+ you on a target. Push every box onto a target; you can push one box at a time by walking into "
    "it, never pull. Each turn answer with exactly one move in the form <action>up</action>, where "
    "the move is one of: up, down, left, right."
)


def apply_move(walls: frozenset, player: Cell, boxes: frozenset, move: str) -> tuple[Cell, frozenset, bool]:
    """The state after ``move`` and whether anything moved (push rules of Sokoban)."""
    dr, dc = MOVES[move]
    nxt = (player[0] + dr, player[1] + dc)
    if nxt in walls:
        return player, boxes, False
    if nxt in boxes:
        beyond = (nxt[0] + dr, nxt[1] + dc)
        if beyond in walls or beyond in boxes:
            return player, boxes, False
        return nxt, (boxes - {nxt}) | {beyond}, True
    return nxt, boxes, True


def solve(walls: frozenset, targets: frozenset, player: Cell, boxes: frozenset) -> list[str] | None:
    """A shortest action list putting every box on a target, or None (BFS, capped in states)."""
    start: State = (player, boxes)
    previous: dict[State, tuple[State, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if state[1] == targets:
            path: list[str] = []
            while previous[state] is not None:
                state, move = previous[state]  # type: ignore[misc]
                path.append(move)
            return path[::-1]
        for move in ACTIONS:
            p, b, moved = apply_move(walls, state[0], state[1], move)
            if moved and (p, b) not in previous:
                previous[(p, b)] = (state, move)
                queue.append((p, b))
        if len(previous) > _MAX_STATES:
            return None
    return None


class Sokoban(GridMoveEnv):
    """Sokoban environment following the ``reset(seed)`` / ``step(action)`` protocol.

    ``reset(None)`` is the same as ``reset(0)``. After reset, ``solution`` holds a shortest
    solution and every step's ``info`` carries ``optimal_steps`` (its length).
    """

    system_prompt, board_name = SYSTEM_PROMPT, "room"

    def __init__(self, size: int = 6, boxes: int = 1, max_steps: int | None = None, instructions: str | None = None):
        self.instructions = instructions or self.system_prompt
        if size < 4:
            raise ValueError("sokoban: size must be at least 4")
        if boxes < 1 or 2 * boxes + 1 > (size - 2) ** 2:
            raise ValueError(f"sokoban: {boxes} boxes do not fit in a {size}x{size} room")
        self.size, self.n_boxes = size, boxes
        self.max_steps = max_steps if max_steps is not None else 3 * size * size
        self.walls: frozenset = frozenset()
        self.targets: frozenset = frozenset()
        self.boxes: frozenset = frozenset()
        self.player: Cell = (1, 1)
        self.solution: list[str] = []
        self.room_id = ""
        self.steps = 0
        self.done = True

    # --- generation -------------------------------------------------------------------------
    def _generate(self, rng: random.Random) -> None:
        n = self.size
        border = {(r, c) for r in range(n) for c in range(n) if r in (0, n - 1) or c in (0, n - 1)}
        interior = [(r, c) for r in range(1, n - 1) for c in range(1, n - 1)]
        for _ in range(_MAX_ATTEMPTS):
            n_inner = rng.randint(0, max(0, (len(interior) - 2 * self.n_boxes - 1) // 4))
            picks = rng.sample(interior, n_inner + 2 * self.n_boxes + 1)
            inner = picks[:n_inner]
            targets = frozenset(picks[n_inner : n_inner + self.n_boxes])
            boxes = frozenset(picks[n_inner + self.n_boxes : n_inner + 2 * self.n_boxes])
            player = picks[-1]
            walls = frozenset(border | set(inner))
            solution = solve(walls, targets, player, boxes)
            if solution:  # solvable and not already solved
                self.walls, self.targets, self.boxes, self.player = walls, targets, boxes, player
                self.solution = solution
                return
        raise ValueError(f"sokoban: no solvable {n}x{n} room with {self.n_boxes} boxes after {_MAX_ATTEMPTS} attempts")

    # --- protocol ---------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> Observation:
        seed = 0 if seed is None else seed
        self._generate(random.Random(f"sokoban-{self.size}-{self.n_boxes}-{seed}"))
        self.room_id = stable_id(repr((self.size, sorted(self.walls), sorted(self.targets))))
        self.steps, self.done = 0, False
        return self.observation()

    def expert_action(self) -> str | None:
        """The next move of a shortest solution from here (BFS), if there is one."""
        path = solve(self.walls, self.targets, self.player, self.boxes)
        return path[0] if path else None

    def _extra_info(self) -> dict[str, Any]:
        return {"optimal_steps": len(self.solution)}

    def _move(self, move: str) -> dict[str, Any]:
        self.player, self.boxes, moved = apply_move(self.walls, self.player, self.boxes, move)
        return {"action": move, "moved": moved, **self._extra_info()}

    def _outcome(self) -> str | None:
        return "success" if self.boxes == self.targets else None

    # --- views ------------------------------------------------------------------------------
    @property
    def anchor_state(self) -> tuple[str, Cell, frozenset]:
        return (self.room_id, self.player, self.boxes)

    def render(self) -> str:
        rows = []
        for r in range(self.size):
            row = []
            for c in range(self.size):
                cell = (r, c)
                if cell in self.walls:
                    row.append("#")
                elif cell == self.player:
                    row.append("+" if cell in self.targets else "@")
                elif cell in self.boxes:
                    row.append("*" if cell in self.targets else "$")
                else:
                    row.append("." if cell in self.targets else "_")
            rows.append("".join(row))
        return "\n".join(rows)
