"""What the grid environments (gridworld, sokoban) share: the ``step`` protocol around one move,
and the observation built from their rendered board."""

from __future__ import annotations

import re
from typing import Any

from grouprl.records import Observation, StepResult
from grouprl.tasks.interface import Environment

ACTIONS = ["up", "down", "left", "right"]
MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)


def strip_tags(action: str) -> str:
    """The last ``<action>...</action>`` body if the action is tagged, else the action itself."""
    found = _TAG.findall(action)
    return found[-1] if found else action


def parse_action(action: str) -> str:
    """The bare move: tags stripped, whitespace trimmed, lower-cased."""
    return strip_tags(action).strip().lower()


class GridMoveEnv(Environment):
    """Subclasses set ``system_prompt`` and ``board_name``, set ``instructions`` (the system message's
    task text: their ``instructions=`` argument, else ``system_prompt``) and implement ``_move``,
    ``_outcome``, ``render`` and ``anchor_state``; ``reset`` sets ``steps = 0`` and ``done = False``."""

    system_prompt = ""
    board_name = "board"

    max_steps = 0
    steps = 0
    done = True

    def _extra_info(self) -> dict[str, Any]:
        """Fields every step's ``info`` carries (invalid steps included)."""
        return {}

    def _move(self, move: str) -> dict[str, Any]:
        """Apply a valid move to the state; return the step's ``info``."""
        raise NotImplementedError

    def _outcome(self) -> str | None:
        """ "success" (reward 1, done), "fell" (reward 0, done) or None (go on)."""
        raise NotImplementedError

    def render(self) -> str:
        raise NotImplementedError

    @property
    def anchor_state(self) -> Any:
        raise NotImplementedError

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult(self.observation(), 0.0, True, {"invalid": True, "already_done": True})
        move = parse_action(action)
        if move not in MOVES:  # not advanced: no step counted
            return StepResult(self.observation(), 0.0, False, {"invalid": True, **self._extra_info()})
        info = self._move(move)
        self.steps += 1
        outcome, reward = self._outcome(), 0.0
        if outcome == "success":
            reward, self.done, info["success"] = 1.0, True, True
        elif outcome == "fell":
            self.done, info["success"], info["fell"] = True, False, True
        elif self.steps >= self.max_steps:
            self.done, info["success"], info["truncated"] = True, False, True
        return StepResult(self.observation(), reward, self.done, info)

    def observation(self) -> Observation:
        return Observation(
            text=f"Current {self.board_name}:\n{self.render()}\nYour move?",
            anchor_state=self.anchor_state,
            admissible_actions=list(ACTIONS),
        )
