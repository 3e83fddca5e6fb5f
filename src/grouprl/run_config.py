"""The run's configuration: ``config/`` reads and types it, this module resolves its names.

``config/`` knows no task, backend or estimator; here, where a run is assembled, every name a recipe
gives is checked once against its plug-in table (``registry.py``: one line naming the key, its section,
what was found and what is known) and the task's defaults are filled in (``max_new_tokens``). Rewards
are checked where the scorer is built (their names also reach reward models and judges), also before
any model loads.
"""

from __future__ import annotations

import os
from typing import Any

from grouprl.config import FIELD_SECTION, Config, ConfigError, load_config
from grouprl.registry import Registry


def plugin_registries() -> list[Registry]:
    """Every plug-in table, each imported from the module that fills it."""
    import grouprl.tasks  # noqa: F401 - every built-in task registers itself
    from grouprl.algos.advantages import ESTIMATORS
    from grouprl.algos.importance import SAMPLING_CORRECTIONS
    from grouprl.algos.policy_losses import POLICY_LOSSES
    from grouprl.rewards.registry import REWARDS
    from grouprl.rollout.generation import BACKENDS
    from grouprl.tasks.registry import TASKS
    from grouprl.tools.parsers import PARSERS
    from grouprl.tools.registry import TOOLS

    return [ESTIMATORS, POLICY_LOSSES, SAMPLING_CORRECTIONS, REWARDS, TOOLS, PARSERS, TASKS, BACKENDS]


def check_names(cfg: Config) -> Config:
    """Every name the config gives a plug-in table (``Registry.config_key``), checked against it without
    importing user code; the task's default completion cap where the config leaves it empty."""
    task_config = cfg.task
    if task_config.env and "task" not in task_config.model_fields_set:
        task_config.task = "env"  # an environment from a file is played as the 'env' task
    if task_config.env and task_config.task != "env":
        raise ConfigError(
            f"invalid configuration:\n  config keys 'task' and 'env': got task {task_config.task!r} with "
            f"env {task_config.env!r}; expected task 'env' (or none) when env names an environment"
        )
    for registry in plugin_registries():
        if registry.config_key is None:
            continue
        section = FIELD_SECTION[registry.config_key]
        value = getattr(getattr(cfg, section), registry.config_key)
        for name in [value] if isinstance(value, str) else value:
            try:
                registry.check(name)
            except KeyError as err:
                raise ConfigError(f"config key '{registry.config_key}' (section {section}): {err}") from None
    if cfg.rollout.max_new_tokens is None:  # bypass validate_assignment: the value is the task's, not the user's
        from grouprl.tasks.registry import task_spec

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
