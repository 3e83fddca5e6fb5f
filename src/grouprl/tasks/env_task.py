"""Multi-step environment tasks: rows that name an episode (a seed, or a question), a picklable
environment factory per row, and demonstrations for the SFT warm start.

The trainer sees the same protocol as :class:`~grouprl.tasks.base.SingleTurnTask`:
``train_rows``/``eval_rows``, ``env_factory(row)``, ``seed_of(row)``, reward names, and
``multi_step``. With no reward functions the episode score is the environment's reward.
"""

from __future__ import annotations

import functools
import random
import re
import string
from dataclasses import dataclass, field
from typing import Any, Callable

from grouprl.rollout.prompts import build_messages
from grouprl.tasks.envs.calculator import SYSTEM_PROMPT as CALCULATOR_PROMPT
from grouprl.tasks.envs.calculator import Calculator, calculate
from grouprl.tasks.envs.gridworld import GridWorld, bfs_path
from grouprl.tasks.envs.sokoban import Sokoban, solve

EVAL_SEED_OFFSET = 1_000_000  # held-out levels: seeds no training row uses
DEMO_SEED_OFFSET = 2_000_000  # SFT demonstration levels: neither training nor evaluation


@dataclass
class EnvTask:
    name: str
    train_rows: list[dict[str, Any]]
    eval_rows: list[dict[str, Any]]
    make_env: Callable[..., Any]  # picklable: make_env(**row["env_args"]) builds the row's environment
    system_prompt: str | None = None  # the environment's instructions (for the tiny model's vocabulary)
    reward_names: list[str] = field(default_factory=list)
    reward_weights: list[float] = field(default_factory=list)
    reward_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    correct_reward: str | None = None  # None: an episode is correct when the environment reports success
    multi_step = True

    def env_factory(self, row: dict[str, Any]):
        return functools.partial(self.make_env, **row.get("env_args", {}))

    def seed_of(self, row: dict[str, Any]) -> int | None:
        return row.get("seed")


def seeded_rows(n: int, offset: int = 0) -> list[dict[str, Any]]:
    return [{"seed": offset + i, "question": f"level {offset + i}"} for i in range(n)]


def expert_action(env) -> str | None:
    """The next move of a shortest solution from the environment's current state (BFS), if any."""
    if isinstance(env, GridWorld):
        path = bfs_path(env.grid, env.pos, env.goal)
    elif isinstance(env, Sokoban):
        path = solve(env.walls, env.targets, env.player, env.boxes)
    elif isinstance(env, Calculator):
        if not env.calls and calculate(env.question).lstrip("-").replace(".", "").isdigit():
            return f"calc({env.question})"  # arithmetic questions are expressions
        return f"Final: {env.answer}"
    else:
        return None
    return path[0] if path else None


def format_action(action: str, pattern: str | None) -> str:
    """The completion that carries ``action`` under the runner's action pattern."""
    if not pattern:
        return action
    tag = re.fullmatch(r"<(\w+)>\(\.\*\?\)</\1>", pattern)
    if tag:
        return f"<{tag.group(1)}>{action}</{tag.group(1)}>"
    raise ValueError(f"no demonstration format for action_pattern {pattern!r}; use '<tag>(.*?)</tag>' or ''")


def demonstrations(task: EnvTask, rows: list[dict[str, Any]], policy: str, max_steps: int, history_length: int,
                   action_pattern: str | None, show_admissible: bool = True,
                   seed: int = 0) -> list[dict[str, Any]]:
    """(prompt messages, action completion) pairs from playing each row's environment.

    ``policy="expert"`` plays a shortest solution (BFS); ``"random"`` plays uniformly random
    admissible moves (it teaches the action format and a near-uniform policy, leaving the
    decisions to RL). Prompts come from the runner's own prompt builder, history included.
    """
    rng = random.Random(seed)
    out = []
    for row in rows:
        env = task.env_factory(row)()
        obs = env.reset(task.seed_of(row))
        history: list[tuple[str, str]] = []
        for _ in range(max_steps):
            if policy == "expert":
                action = expert_action(env)
            elif obs.admissible_actions:
                action = rng.choice(obs.admissible_actions)
            else:
                action = expert_action(env)
            if action is None:
                break
            completion = format_action(action, action_pattern)
            messages = build_messages(getattr(env, "instructions", ""), history, obs, history_length,
                                      show_admissible)
            out.append({"messages": messages, "gold_completion": completion})
            result = env.step(action)
            history.append((obs.text, completion))
            if result.done:
                break
            obs = result.observation
    return out


def corpus(task: EnvTask, demos: list[dict[str, Any]]) -> str:
    """Every character the task can show: printable ASCII plus what the demonstrations contain."""
    chars = set(string.printable)
    for d in demos:
        chars |= set(d["gold_completion"])
        for m in d["messages"]:
            chars |= set(m["content"])
    return "".join(sorted(chars))


def load_env_task(cfg, single_turn_rows: Callable[[], tuple[list, list]] | None = None) -> EnvTask:
    """The environment task the config names (gridworld, sokoban or calculator)."""
    t, r = cfg.task, cfg.rollout
    n_train, n_eval = t.n_train or 10_000, max(cfg.eval.n_eval, 1)
    if t.task == "gridworld":
        make = functools.partial(GridWorld, size=t.grid_size, hole_fraction=t.hole_fraction, slippery=t.slippery,
                                 max_steps=r.max_episode_steps, instructions=t.system_prompt)
        return EnvTask("gridworld", seeded_rows(n_train), seeded_rows(n_eval, EVAL_SEED_OFFSET), make,
                       make().instructions)
    if t.task == "sokoban":
        make = functools.partial(Sokoban, size=t.sokoban_size, boxes=t.sokoban_boxes, max_steps=r.max_episode_steps,
                                 instructions=t.system_prompt)
        return EnvTask("sokoban", seeded_rows(n_train), seeded_rows(n_eval, EVAL_SEED_OFFSET), make,
                       make().instructions)
    if t.task == "calculator":
        assert single_turn_rows is not None
        train, held_out = single_turn_rows()
        for row in train + held_out:
            row["env_args"] = {"question": row["question"], "answer": _answer_of(row),
                               "max_calls": t.calculator_max_calls, "instructions": t.system_prompt}
        return EnvTask("calculator", train, held_out, Calculator, t.system_prompt or CALCULATOR_PROMPT)
    raise ValueError(f"not an environment task: {t.task!r}")


def _answer_of(row: dict[str, Any]) -> str:
    return Calculator.from_row(row).answer


__all__ = ["EnvTask", "corpus", "demonstrations", "expert_action", "load_env_task"]
