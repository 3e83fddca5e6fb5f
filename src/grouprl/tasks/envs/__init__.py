"""Seeded, reproducible multi-step text environments (``reset(seed)`` / ``step(action)``).

- :class:`GridWorld`: a FrozenLake-style map, optionally slippery;
- :class:`Sokoban`: small rooms verified solvable by BFS at generation;
- :class:`Maze`: walled mazes with a far goal and exact optimal values (step-credit studies);
- :class:`Calculator`: a question answered with ``calc(...)`` tool calls and ``Final: <number>``.
"""

from __future__ import annotations

from grouprl.tasks.envs.calculator import Calculator
from grouprl.tasks.envs.gridworld import GridWorld
from grouprl.tasks.envs.maze import Maze
from grouprl.tasks.envs.sokoban import Sokoban

ENVIRONMENTS = {"gridworld": GridWorld, "sokoban": Sokoban, "maze": Maze, "calculator": Calculator}

__all__ = ["ENVIRONMENTS", "Calculator", "GridWorld", "Maze", "Sokoban"]
