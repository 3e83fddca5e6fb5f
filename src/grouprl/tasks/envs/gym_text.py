"""Gymnasium environments as grouprl text environments (``reset(seed)`` / ``step(action: str)``).

:class:`GymTextEnv` wraps a gymnasium environment (an env id with ``gymnasium.make`` keyword
arguments, or an environment already made) and speaks the grouprl protocol:

- the gymnasium observation becomes ``Observation.text`` through ``observation_text``
  (default ``str(obs)``; ``"ansi"`` uses ``env.render()`` of an env made with
  ``render_mode="ansi"``; or any ``f(obs, env) -> str``);
- the action text is mapped back to a gymnasium action: for a ``Discrete`` space by
  ``action_names`` (default ``"0"`` .. ``"n-1"``; matched case-insensitively after stripping
  whitespace and an optional ``<action>...</action>`` tag), for any other space by the
  ``parse_action`` you pass. Unknown text is an invalid action: the environment is not
  advanced, reward 0, ``done`` False, ``info["invalid"] = True``;
- ``Observation.anchor_state`` (what GiGPO groups steps on) is ``anchor_key(obs)``, by
  default the observation itself when hashable, else a stable hash (numpy arrays: dtype,
  shape and a SHA-1 of the bytes; dicts/tuples/lists element-wise);
- ``reset(seed)`` calls ``env.reset(seed=seed)`` (``None`` means 0, as in the other grouprl
  environments), so every episode of a group starts from the same state and, with the same
  actions, follows the same trajectory (gymnasium seeds the env's RNG on reset);
- ``StepResult.info`` is gymnasium's info plus ``terminated``, ``truncated`` and ``success``
  (by default: terminated with a positive last reward); ``done = terminated or truncated``.
  Step limits are gymnasium's: pass ``max_episode_steps`` in the make keyword arguments.

Usage (FrozenLake, whose actions are 0 left, 1 down, 2 right, 3 up)::

    import gymnasium
    from grouprl.tasks.envs.gym_text import GymTextEnv, frozen_lake_text

    env = GymTextEnv(
        gymnasium.make("FrozenLake-v1", map_name="4x4", is_slippery=False, render_mode="ansi"),
        observation_text="ansi",                # or frozen_lake_text: the map with P for the agent
        action_names=["left", "down", "right", "up"],
        instructions="Walk from S to G on the frozen lake without falling into a hole (H).",
    )
    obs = env.reset(seed=0)                     # obs.text: the ansi map, obs.anchor_state: 0
    result = env.step("<action>right</action>") # StepResult(observation, 0.0, False, info)

For the rollout runner, build environments from a picklable zero-argument factory (an env
id, not an env object, so a Ray worker can make its own), with module-level functions rather
than lambdas for the callables::

    functools.partial(GymTextEnv, "FrozenLake-v1",
                      make_kwargs={"map_name": "4x4", "is_slippery": False},
                      observation_text=frozen_lake_text,
                      action_names=["left", "down", "right", "up"])
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from grouprl.records import Observation, StepResult
from grouprl.tasks.interface import Environment

ObservationText = Callable[[Any, Any], str]  # (gymnasium obs, gymnasium env) -> text
SuccessFn = Callable[[float, bool, bool, dict[str, Any]], bool]  # (reward, terminated, truncated, info)

_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)


def _import_gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError as error:  # pragma: no cover - exercised only without gymnasium
        raise ImportError("GymTextEnv needs gymnasium: pip install gymnasium") from error
    return gymnasium


def action_text(action: str) -> str:
    """The bare action: the last ``<action>...</action>`` body if tagged, trimmed and lower-cased."""
    found = _TAG.findall(action)
    return (found[-1] if found else action).strip().lower()


def default_success(reward: float, terminated: bool, truncated: bool, info: dict[str, Any]) -> bool:
    """An episode succeeded when it terminated (not truncated) on a positive reward."""
    return terminated and reward > 0


def str_text(obs: Any, env: Any) -> str:
    """``str(obs)``: the default observation text."""
    return str(obs)


def ansi_text(obs: Any, env: Any) -> str:
    """``env.render()`` of an environment made with ``render_mode="ansi"``."""
    return str(env.render())


def frozen_lake_text(obs: Any, env: Any) -> str:
    """The FrozenLake map with the agent drawn as ``P`` (no ANSI colour codes).

    Legend: ``S`` start, ``F`` frozen, ``H`` hole, ``G`` goal, ``P`` the agent.
    """
    desc = env.unwrapped.desc
    ncol = desc.shape[1]
    rows = [[cell.decode() if isinstance(cell, bytes) else str(cell) for cell in row] for row in desc]
    rows[int(obs) // ncol][int(obs) % ncol] = "P"
    return "\n".join("".join(row) for row in rows)


def stable_anchor(obs: Any) -> Hashable:
    """A hashable value equal for equal observations, the same across processes.

    Plain hashable values are kept (numpy scalars become Python numbers); numpy arrays become
    ``("ndarray", dtype, shape, sha1)``; dicts, lists and tuples are converted element-wise
    (dict keys sorted); anything else unhashable falls back to its ``repr``.
    """
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None  # type: ignore[assignment]
    if np is not None:
        if isinstance(obs, np.ndarray):
            data = np.ascontiguousarray(obs)
            return ("ndarray", data.dtype.str, data.shape, hashlib.sha1(data.tobytes()).hexdigest())
        if isinstance(obs, np.generic):
            return obs.item()
    if isinstance(obs, dict):
        return tuple(sorted(((key, stable_anchor(value)) for key, value in obs.items()), key=lambda kv: repr(kv[0])))
    if isinstance(obs, (list, tuple)):
        return tuple(stable_anchor(value) for value in obs)
    try:
        hash(obs)
    except TypeError:
        return ("repr", repr(obs))
    return obs


def _action_table(
    space: Any, discrete: Any, action_names: Sequence[str] | None, parse_action: Callable[[str], Any] | None
) -> tuple[list[str] | None, dict[str, Any]]:
    """The action names and, for a ``Discrete`` space, each name's action (its key: ``action_text`` of the
    name); ``ValueError`` when the names do not fit the space or a non-``Discrete`` space has no parser."""
    if isinstance(space, discrete):
        n, start = int(space.n), int(space.start)
        names = [str(start + i) for i in range(n)] if action_names is None else [str(a) for a in action_names]
        if len(names) != n:
            raise ValueError(
                f"gym_text: action_names has {len(names)} names {names} but the action space {space} has {n} actions"
            )
        keys = [action_text(name) for name in names]
        if "" in keys or len(set(keys)) != n:
            raise ValueError(f"gym_text: action_names must be non-empty and distinct (case-insensitive), got {names}")
        return names, {key: start + i for i, key in enumerate(keys)}
    if parse_action is None:
        raise ValueError(
            f"gym_text: the action space {space} is not Discrete; pass parse_action "
            "(a function from the action text to an action of this space)"
        )
    return (None if action_names is None else [str(a) for a in action_names]), {}


class GymTextEnv(Environment):
    """A gymnasium environment behind the grouprl text protocol.

    Args:
        env: a gymnasium env id (made with ``gymnasium.make(env, **make_kwargs)``) or an
            already-made ``gymnasium.Env``.
        make_kwargs: keyword arguments for ``gymnasium.make`` (only with an env id), e.g.
            ``{"map_name": "4x4", "is_slippery": False, "max_episode_steps": 50}``.
        observation_text: how the gymnasium observation is shown to the policy:
            ``"str"`` (default, ``str(obs)``), ``"ansi"`` (``env.render()``; the env must have
            ``render_mode="ansi"``), or a function ``f(obs, env) -> str``.
        action_names: one name per action of a ``Discrete(n, start)`` space, in index order
            (default ``str(start)`` .. ``str(start + n - 1)``). Matched case-insensitively;
            they are the ``admissible_actions`` of every observation.
        parse_action: ``f(text) -> gymnasium action`` for any action space (required for a
            non-``Discrete`` one; overrides ``action_names`` matching when given). It may
            raise ``ValueError``/``KeyError`` or return ``None`` for text it does not accept;
            an action outside the action space is invalid too.
        anchor_key: ``f(obs) -> hashable`` GiGPO anchor (default :func:`stable_anchor`).
        instructions: the task text for the system message. Default: a line naming the
            action names (empty when there are none).
        success: ``f(reward, terminated, truncated, info) -> bool`` evaluated on the step that
            ends the episode (default :func:`default_success`: terminated on a positive reward).
            For CartPole-like tasks (survive until the time limit) pass e.g.
            ``lambda reward, terminated, truncated, info: truncated``.
    """

    def __init__(
        self,
        env: Any,
        *,
        make_kwargs: dict[str, Any] | None = None,
        observation_text: str | ObservationText = "str",
        action_names: Sequence[str] | None = None,
        parse_action: Callable[[str], Any] | None = None,
        anchor_key: Callable[[Any], Hashable] | None = None,
        instructions: str | None = None,
        success: SuccessFn | None = None,
    ):
        gymnasium = _import_gymnasium()
        if isinstance(env, str):
            self.env = gymnasium.make(env, **(make_kwargs or {}))
        elif make_kwargs:
            raise ValueError(
                "gym_text: make_kwargs is only used with an env id string, "
                f"not with an env object ({type(env).__name__})"
            )
        else:
            self.env = env
        self.observation_text = self._text_function(observation_text)
        self.anchor_key = anchor_key or stable_anchor
        self.success = success or default_success
        self.parse_action = parse_action

        self.action_names, self._action_by_name = _action_table(
            self.env.action_space, gymnasium.spaces.Discrete, action_names, parse_action
        )
        if instructions is None:
            instructions = ""
            if self.action_names:
                instructions = (
                    f"Each turn answer with exactly one action in the form "
                    f"<action>{self.action_names[0]}</action>, where the action is one of: "
                    f"{', '.join(self.action_names)}."
                )
        self.instructions = instructions
        self._obs: Any = None
        self._observation: Observation | None = None
        self.done = True

    def _text_function(self, observation_text: str | ObservationText) -> ObservationText:
        if callable(observation_text):
            return observation_text
        if observation_text == "str":
            return str_text
        if observation_text == "ansi":
            render_mode = getattr(self.env, "render_mode", None)
            if render_mode != "ansi":
                raise ValueError(
                    f"gym_text: observation_text='ansi' needs an env made with render_mode='ansi', "
                    f"this one has render_mode={render_mode!r}"
                )
            return ansi_text
        raise ValueError(
            f"gym_text: observation_text must be 'str', 'ansi' or a function (obs, env) -> str, "
            f"got {observation_text!r}"
        )

    # --- protocol ---------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> Observation:
        self._obs, _ = self.env.reset(seed=0 if seed is None else seed)
        self.done = False
        self._observation = self._make_observation(self._obs)
        return self._observation

    def step(self, action: str) -> StepResult:
        if self._observation is None:
            raise RuntimeError("gym_text: call reset(seed) before step(action)")
        if self.done:
            return StepResult(self._observation, 0.0, True, {"invalid": True, "already_done": True})
        env_action, reason = self._to_env_action(action)
        if reason is not None:  # not advanced
            return StepResult(self._observation, 0.0, False, {"invalid": True, "reason": reason})
        obs, reward, terminated, truncated, gym_info = self.env.step(env_action)
        reward, terminated, truncated = float(reward), bool(terminated), bool(truncated)
        info = dict(gym_info)
        self.done = terminated or truncated
        info.update(
            terminated=terminated,
            truncated=truncated,
            success=bool(self.success(reward, terminated, truncated, info)) if self.done else False,
        )
        self._obs = obs
        self._observation = self._make_observation(obs)
        return StepResult(self._observation, reward, self.done, info)

    def close(self) -> None:
        self.env.close()

    # --- helpers ----------------------------------------------------------------------------
    def _to_env_action(self, action: str) -> tuple[Any, str | None]:
        """The gymnasium action for ``action``, or (None, why it is invalid)."""
        if self.parse_action is not None:
            try:
                env_action = self.parse_action(action)
            except (ValueError, KeyError, TypeError) as error:
                return None, f"could not parse action {action!r}: {error}"
            if env_action is None:
                return None, f"could not parse action {action!r}"
            try:
                inside = self.env.action_space.contains(env_action)
            except Exception:  # noqa: BLE001 - a malformed action is just invalid
                inside = False
            if not inside:
                return None, f"action {action!r} parsed to {env_action!r}, outside {self.env.action_space}"
            return env_action, None
        key = action_text(action)
        if key not in self._action_by_name:
            return None, f"unknown action {action!r}; expected one of {self.action_names}"
        return self._action_by_name[key], None

    def _make_observation(self, obs: Any) -> Observation:
        return Observation(
            text=self.observation_text(obs, self.env),
            anchor_state=self.anchor_key(obs),
            admissible_actions=list(self.action_names) if self.action_names else None,
        )
