"""The task registry: every task in one place, found by name.

A task registers a builder ``build(cfg) -> Task`` with its name, its default completion cap
and, if it has fields of its own, a config section::

    class CountingConfig(Section):
        counting_start: int = Field(0, description="counting: the first number")

    @register_task("counting", max_new_tokens=64, section=("counting", CountingConfig))
    def build_counting(cfg: Config) -> Task:
        ...  # read cfg.counting.counting_start

The section's fields then work as ``--counting_start``, ``GROUPRL_COUNTING_START`` and in recipes
(nested under ``counting:`` or flat), like every other field. The built-in tasks' sections are
typed in ``config/task_sections.py``.

A built task is a :class:`~grouprl.tasks.interface.Task` (``SingleTurnTask``, ``EnvTask`` or your
own subclass): its rows, ``env_factory(row)``, rewards and ``tokenizer_corpus()``, with every optional
hook defaulted there. A recipe may also name one from a file, ``task: path/to/file.py:make_task``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

from grouprl.config import Config, ConfigError, Section, register_section
from grouprl.registry import Registry
from grouprl.tasks.interface import Task
from grouprl.user_code import CodeRef, import_callable

TaskBuilder = Callable[[Config], Any]


@dataclass(frozen=True)
class TaskSpec:
    name: str
    build: TaskBuilder
    max_new_tokens: int  # the default completion cap per step (``max_new_tokens`` empty)


FILE_TASK_MAX_NEW_TOKENS = 256  # the completion cap of a task from a file when max_new_tokens is empty


def declare_task(
    name: str,
    build: TaskBuilder,
    max_new_tokens: int = FILE_TASK_MAX_NEW_TOKENS,
    section: tuple[str, type[Section]] | None = None,
) -> TaskSpec:
    """Task ``name`` built by ``build(cfg) -> Task``, with its completion cap (and its config section, if any)."""
    if section is not None:
        register_section(*section)
    return TaskSpec(name, build, max_new_tokens)


def _file_task(name: str, ref: CodeRef) -> TaskSpec:
    """A task from a file is imported when it is built, not when a config naming it is checked."""
    return declare_task(name, functools.partial(_task_from_file, name))


TASKS: Registry[TaskSpec] = Registry("task", declare_task, config_key="task", load=_file_task, code_form="make_task")


def register_task(
    name: str, max_new_tokens: int, section: tuple[str, type[Section]] | None = None
) -> Callable[[TaskBuilder], TaskBuilder]:
    """Register ``build(cfg) -> Task`` as task ``name`` (and its config section, if any)."""
    return TASKS.register(name, max_new_tokens=max_new_tokens, section=section)


task_spec = TASKS.resolve  # a registered task, or 'path/to/file.py:make_task' / 'package.module:make_task'


def _task_from_file(spec: str, cfg: Config) -> Task:
    try:
        make_task = import_callable(spec, "task")
    except KeyError as err:
        raise ConfigError(str(err).strip("'\"")) from None
    task = make_task(cfg)
    if not isinstance(task, Task):
        raise ConfigError(
            f"task '{spec}': make_task(cfg) returned {type(task).__name__}; expected a "
            "grouprl.tasks.interface.Task (subclass it, or SingleTurnTask / EnvTask)"
        )
    return task


def load_task(cfg: Config):
    """The task the config names, with the recipe's rewards (which replace the task's defaults)."""
    return with_rewards(cfg, task_spec(cfg.task.task).build(cfg))


def with_rewards(cfg: Config, task):
    """Recipe reward specs replace the task's default rewards (environments default to none)."""
    task_config = cfg.task
    spec_weights: list[float] = []
    if task_config.rewards:
        task.reward_names, task.reward_kwargs = [], {}
        for spec in task_config.rewards:
            name = spec if isinstance(spec, str) else spec.name
            task.reward_names.append(name)
            spec_weights.append(1.0 if isinstance(spec, str) else spec.weight)
            if not isinstance(spec, str) and spec.options:
                task.reward_kwargs[name] = dict(spec.options)
    weights = task_config.reward_weights or spec_weights or [1.0] * len(task.reward_names)
    if len(weights) != len(task.reward_names):
        raise ConfigError(
            f"config key 'reward_weights': got {len(weights)} weights for rewards {task.reward_names}; expected one each"
        )
    task.reward_weights = list(weights)
    return task
