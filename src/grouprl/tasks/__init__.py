"""Where episodes come from. Importing this package registers the built-in tasks."""

from __future__ import annotations

from grouprl.tasks import arithmetic, env_task, gsm8k, prompt_dataset  # noqa: F401 - each registers its tasks
from grouprl.tasks.base import SingleTurnEnv, SingleTurnTask
from grouprl.tasks.env_task import EnvTask
from grouprl.tasks.interface import Environment, Task
from grouprl.tasks.registry import TASKS, load_task, register_task
from grouprl.tasks.slates import task as _slates  # noqa: F401, E402 - registers the slates task (GRAIL)
from grouprl.tasks import tool_arithmetic  # noqa: F401, E402 - registers tool_arithmetic

__all__ = ["TASKS", "EnvTask", "Environment", "SingleTurnEnv", "SingleTurnTask", "Task", "load_task", "register_task"]
