"""One typed ``Config`` at the bottom of grouprl: it imports nothing from tasks, backends or estimators.

- ``base.py``: ``Section``, ``ConfigError``, the one value parser.
- ``sections.py``: model, task, rollout, algorithm, speed, tools. ``objective_sections.py``: objective (loss,
  entropy bonus, dynamic sampling, curriculum). ``run_sections.py``: train (with the schedule), eval (with
  evaluation during training), logging (with tracking), runtime, prompts, hub.
- ``task_sections.py``: each built-in task's own section, GRAIL's switches with their environment
  aliases.
- ``model.py``: ``Config`` and its tables; ``register_section`` for a task that is not built in.
- ``load.py``: defaults < recipe < environment < flags (``load_config``); ``openr1.py``: open-r1 /
  TRL recipe keys translated, a pure function.

The whole run's config, with names resolved against their registries, is
``grouprl.run_config.build_config``.
"""

from grouprl.config.base import ConfigError, Section, parse_value
from grouprl.config.load import ENV_VARS, env_overrides, env_vars, load_config, read_recipe
from grouprl.config.model import EXTRA_SECTIONS, FIELD_SECTION, SECTIONS, Config, flat_dict, register_section
from grouprl.config.objective_sections import ObjectiveConfig
from grouprl.config.run_sections import (
    EvalConfig,
    HubConfig,
    LoggingConfig,
    PromptsConfig,
    RuntimeConfig,
    TrainConfig,
    resolve_schedule,
)
from grouprl.config.sections import (
    AlgorithmConfig,
    ModelConfig,
    RewardSpec,
    RolloutConfig,
    SpeedConfig,
    TaskConfig,
    ToolsConfig,
)
from grouprl.config.task_sections import (
    ArithmeticConfig,
    CalculatorConfig,
    DatasetMixture,
    GrailConfig,
    GridworldConfig,
    MazeConfig,
    PromptDatasetConfig,
    SlatesConfig,
    SokobanConfig,
)

__all__ = [
    "ENV_VARS",
    "EXTRA_SECTIONS",
    "FIELD_SECTION",
    "SECTIONS",
    "AlgorithmConfig",
    "ArithmeticConfig",
    "CalculatorConfig",
    "Config",
    "ConfigError",
    "DatasetMixture",
    "EvalConfig",
    "GrailConfig",
    "GridworldConfig",
    "HubConfig",
    "LoggingConfig",
    "MazeConfig",
    "ModelConfig",
    "ObjectiveConfig",
    "PromptDatasetConfig",
    "PromptsConfig",
    "RewardSpec",
    "RolloutConfig",
    "RuntimeConfig",
    "Section",
    "SlatesConfig",
    "SokobanConfig",
    "SpeedConfig",
    "TaskConfig",
    "ToolsConfig",
    "TrainConfig",
    "env_overrides",
    "env_vars",
    "flat_dict",
    "load_config",
    "parse_value",
    "read_recipe",
    "register_section",
    "resolve_schedule",
]
