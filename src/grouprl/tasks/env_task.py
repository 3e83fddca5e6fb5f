"""Multi-step environment tasks: rows that name an episode (a seed, or a question), a picklable
environment factory per row, and what the warm start needs (demonstration rows, a corpus).

The trainer sees the same protocol as :class:`~grouprl.tasks.base.SingleTurnTask`:
``train_rows``/``eval_rows``, ``env_factory(row)``, ``seed_of(row)``, reward names, and
``multi_step``. With no reward functions the episode score is the environment's reward.
Expert moves come from the environment itself (its ``expert_action()`` method).
"""

from __future__ import annotations

import functools
import random
import string
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from grouprl.config import Config, ConfigError
from grouprl.records import Observation, StepResult
from grouprl.tasks.envs.calculator import SYSTEM_PROMPT as CALCULATOR_PROMPT
from grouprl.tasks.envs.calculator import Calculator
from grouprl.tasks.envs.gridworld import GridWorld
from grouprl.tasks.envs.maze import Maze
from grouprl.tasks.envs.sokoban import Sokoban
from grouprl.tasks.interface import Environment, Task, instructions_of
from grouprl.tasks.registry import register_task, task_spec
from grouprl.user_code import import_callable

EVAL_SEED_OFFSET = 1_000_000  # held-out levels: seeds no training row uses
DEMO_SEED_OFFSET = 2_000_000  # SFT demonstration levels: neither training nor evaluation
CORPUS_ROWS = 20  # training and evaluation rows played to collect the tokenizer corpus


@dataclass
class EnvTask(Task):
    name: str
    train_rows: list[dict[str, Any]]
    eval_rows: list[dict[str, Any]]
    make_env: Callable[..., Any]  # picklable: make_env(**row["env_args"]) builds the row's environment
    system_prompt: str | None = None  # the environment's instructions (for the tiny model's vocabulary)
    reward_names: list[str] = field(default_factory=list)
    reward_weights: list[float] = field(default_factory=list)
    reward_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    correct_reward: str | None = None  # None: an episode is correct when the environment reports success
    demo_policy: str = "random"  # how demonstrations (and the corpus episodes) are played: random | expert
    demo_seed: int = 0
    demos_on_seeds: bool = True  # demonstrations on unused seeds (else on training rows nobody checks)
    max_steps: int = 10
    action_pattern: str | None = None
    show_admissible: bool = True
    multi_step = True

    def env_factory(self, row: dict[str, Any]):
        return functools.partial(self.make_env, **row.get("env_args", {}))

    def seed_of(self, row: dict[str, Any]) -> int | None:
        return row.get("seed")

    def demonstration_rows(self, n: int, skip: int) -> list[dict[str, Any]]:
        """Rows to play demonstrations on: ``n`` unused seeds, or training rows after the first ``skip``."""
        return seeded_rows(n, DEMO_SEED_OFFSET) if self.demos_on_seeds else self.train_rows[skip : skip + n]

    def tokenizer_corpus(self) -> str:
        """Printable ASCII plus every character of the instructions, observations and actions of
        episodes played (as the demonstrations are) on the first training and evaluation rows."""
        chars = set(string.printable) | set(self.system_prompt or "") | set(self.action_pattern or "")
        rng = random.Random(self.demo_seed)
        for row in self.train_rows[:CORPUS_ROWS] + self.eval_rows[:CORPUS_ROWS]:
            for instructions, obs, action, _ in play(self, row, self.demo_policy, rng, self.max_steps):
                chars |= set(instructions) | set(obs.text) | set(action)
                if self.show_admissible and obs.admissible_actions:
                    chars |= {c for a in obs.admissible_actions for c in a}
        return "".join(sorted(chars))


def seeded_rows(n: int, offset: int = 0) -> list[dict[str, Any]]:
    return [{"seed": offset + i, "question": f"level {offset + i}"} for i in range(n)]


def expert_action(env: Environment) -> str | None:
    """The environment's next expert move (``env.expert_action()``), or None if it has none."""
    return env.expert_action()


def play(
    task: EnvTask, row: dict[str, Any], policy: str, rng: random.Random, max_steps: int
) -> Iterator[tuple[str, Observation, str, StepResult]]:
    """(instructions, observation, action, result) for each step of one episode on ``row``.

    ``policy="expert"`` plays the environment's expert moves; ``"random"`` uniformly random
    admissible moves (expert ones where the environment lists none).
    """
    env = task.env_factory(row)()
    obs = env.reset(task.seed_of(row))
    instructions = instructions_of(env)
    for _ in range(max_steps):
        if policy != "expert" and obs.admissible_actions:
            action = rng.choice(obs.admissible_actions)
        else:
            action = expert_action(env)
        if action is None:
            break
        result = env.step(action)
        yield instructions, obs, action, result
        if result.done:
            break
        obs = result.observation


def _env_task(cfg: Config, name: str, train, held_out, make, system_prompt, demos_on_seeds=True) -> EnvTask:
    rollout = cfg.rollout
    return EnvTask(
        name,
        train,
        held_out,
        make,
        system_prompt,
        demo_policy=cfg.train.sft_demonstrations,
        demo_seed=cfg.train.seed,
        demos_on_seeds=demos_on_seeds,
        max_steps=rollout.max_episode_steps,
        action_pattern=rollout.action_pattern or None,
        show_admissible=rollout.show_admissible_actions,
    )


def _sizes(cfg: Config) -> tuple[int, int]:
    return cfg.task.n_train or 10_000, max(cfg.eval.n_eval, 1)


@register_task("gridworld", max_new_tokens=24)
def build_gridworld(cfg: Config) -> EnvTask:
    task_config, (n_train, n_eval) = cfg.task, _sizes(cfg)
    grid = cfg.gridworld
    make = functools.partial(
        GridWorld,
        size=grid.grid_size,
        hole_fraction=grid.hole_fraction,
        slippery=grid.slippery,
        max_steps=cfg.rollout.max_episode_steps,
        instructions=task_config.system_prompt,
    )
    return _env_task(
        cfg, "gridworld", seeded_rows(n_train), seeded_rows(n_eval, EVAL_SEED_OFFSET), make, make().instructions
    )


@register_task("sokoban", max_new_tokens=24)
def build_sokoban(cfg: Config) -> EnvTask:
    task_config, (n_train, n_eval) = cfg.task, _sizes(cfg)
    make = functools.partial(
        Sokoban,
        size=cfg.sokoban.sokoban_size,
        boxes=cfg.sokoban.sokoban_boxes,
        max_steps=cfg.rollout.max_episode_steps,
        instructions=task_config.system_prompt,
    )
    return _env_task(
        cfg, "sokoban", seeded_rows(n_train), seeded_rows(n_eval, EVAL_SEED_OFFSET), make, make().instructions
    )


@register_task("maze", max_new_tokens=24)
def build_maze(cfg: Config) -> EnvTask:
    """Walled mazes with a far goal and exact optimal values (docs/step_credit.md)."""
    n_train, n_eval = _sizes(cfg)
    make = functools.partial(
        Maze,
        size=cfg.maze.maze_size,
        wall_fraction=cfg.maze.maze_wall_fraction,
        min_path=cfg.maze.maze_min_path,
        view=cfg.maze.maze_view,
        layouts=cfg.maze.maze_layouts,
        max_steps=cfg.rollout.max_episode_steps,
        instructions=cfg.task.system_prompt,
    )
    return _env_task(
        cfg, "maze", seeded_rows(n_train), seeded_rows(n_eval, EVAL_SEED_OFFSET), make, make().instructions
    )


@register_task("calculator", max_new_tokens=48)
def build_calculator(cfg: Config) -> EnvTask:
    """Questions of a single-turn task (``calculator_questions``) answered with calculator calls."""
    task_config = cfg.task
    source = cfg.model_copy(deep=True)
    source.task.task = cfg.calculator.calculator_questions
    questions = task_spec(cfg.calculator.calculator_questions).build(source)
    train, held_out = questions.train_rows, questions.eval_rows
    for row in train + held_out:
        row["env_args"] = {
            "question": row["question"],
            "answer": Calculator.from_row(row).answer,
            "max_calls": cfg.calculator.calculator_max_calls,
            "instructions": task_config.system_prompt,
        }
    return _env_task(
        cfg,
        "calculator",
        train,
        held_out,
        Calculator,
        task_config.system_prompt or CALCULATOR_PROMPT,
        demos_on_seeds=False,
    )


@register_task("env", max_new_tokens=24)
def build_env(cfg: Config) -> EnvTask:
    """An environment from a file (``env: path/to/file.py:make_env``) on seeded levels, like gridworld's."""
    spec = cfg.task.env
    if not spec:
        raise ConfigError("task 'env' needs config key 'env': 'path/to/file.py:make_env' (make_env() -> Environment)")
    try:
        make = import_callable(spec, "env")
    except KeyError as err:
        raise ConfigError(str(err).strip("'\"")) from None
    probe = make()
    if not isinstance(probe, Environment):
        raise ConfigError(
            f"env '{spec}': make_env() returned {type(probe).__name__}; expected a "
            "grouprl.tasks.interface.Environment (subclass it: reset, step)"
        )
    n_train, n_eval = _sizes(cfg)
    return _env_task(
        cfg,
        "env",
        seeded_rows(n_train),
        seeded_rows(n_eval, EVAL_SEED_OFFSET),
        make,
        cfg.task.system_prompt or probe.instructions,
    )


__all__ = ["EnvTask", "expert_action", "play", "seeded_rows"]
