"""The run's configuration: ``config/`` reads and types it, this module resolves its names.

``config/`` knows no task, backend or estimator; here, where a run is assembled, the names a
recipe gives are checked once against their registries (one line naming the key, what was found,
what is known) and the task's defaults are filled in (``max_new_tokens``). Losses and rewards are
checked where they are built (``train/objective``, ``rewards/scorer``), also before any model loads.
"""

from __future__ import annotations

import os
from typing import Any

from grouprl.config import Config, ConfigError, load_config


def check_names(cfg: Config) -> Config:
    """Task, generation backend and advantage estimator against their registries; the task's
    default completion cap where the config leaves it empty."""
    import grouprl.tasks  # noqa: F401 - every built-in task registers itself
    from grouprl.algos.advantages import ADVANTAGES
    from grouprl.rollout.generation import BACKENDS
    from grouprl.tasks.registry import TASKS, task_spec

    task_config = cfg.task
    if task_config.env and "task" not in task_config.model_fields_set:
        task_config.task = "env"  # an environment from a file is played as the 'env' task
    if task_config.env and task_config.task != "env":
        raise ConfigError(f"invalid configuration:\n  config keys 'task' and 'env': got task {task_config.task!r} with "
                          f"env {task_config.env!r}; expected task 'env' (or none) when env names an environment")
    for key, value, known, section in [
        ("task", cfg.task.task, TASKS, "task"),
        ("advantage", cfg.algorithm.advantage, ADVANTAGES, "algorithm"),
        ("generation_backend", cfg.rollout.generation_backend, BACKENDS, "rollout"),
    ]:
        from_file = ":" in value and key in ("advantage", "task")
        if value not in known and not from_file:
            own = " or 'path/to/file.py:function' / 'package.module:function'" if key == "advantage" else ""
            own = " or 'path/to/file.py:make_task'" if key == "task" else own
            raise ConfigError(f"invalid configuration:\n  config key '{key}' (section {section}): got {value!r}; "
                              f"expected one of {', '.join(repr(n) for n in known)}{own}")
    if cfg.rollout.max_new_tokens is None:  # bypass validate_assignment: the value is the task's, not the user's
        cfg.rollout.__dict__["max_new_tokens"] = task_spec(cfg.task.task).max_new_tokens
    return cfg


def build_config(
    recipe: str | os.PathLike | None = None,
    cli: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
    job: dict[str, Any] | None = None,
) -> Config:
    """Defaults < built-in job < recipe < environment < CLI, validated as one model, names checked."""
    import grouprl.tasks  # noqa: F401 - a registered task's own section must be known before the recipe is read

    return check_names(load_config(recipe, cli, environ, job))
