"""``Config``: every section as a typed field, and the tables built from them (section of each flat
field name). A task that is not built in adds its section with ``register_section``."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, model_validator

from grouprl.config.base import Section
from grouprl.config.distill_sections import DistillConfig
from grouprl.config.objective_sections import ObjectiveConfig
from grouprl.config.run_sections import EvalConfig, HubConfig, LoggingConfig, PromptsConfig, RuntimeConfig, TrainConfig
from grouprl.config.sections import (
    AlgorithmConfig,
    ModelConfig,
    RolloutConfig,
    SpeedConfig,
    TaskConfig,
    ToolsConfig,
)
from grouprl.config.task_sections import (
    ArithmeticConfig,
    CalculatorConfig,
    GrailConfig,
    GridworldConfig,
    MazeConfig,
    PromptDatasetConfig,
    SlatesConfig,
    SokobanConfig,
)

# Sections added at run time (a task's own section, ``register_task(..., section=...)``): name -> class.
EXTRA_SECTIONS: dict[str, type[Section]] = {}


class Config(Section):
    model_config = ConfigDict(extra="allow", validate_assignment=True, protected_namespaces=())
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    objective: ObjectiveConfig = Field(default_factory=ObjectiveConfig)
    distill: DistillConfig = Field(default_factory=DistillConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    speed: SpeedConfig = Field(default_factory=SpeedConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    prompts: PromptsConfig = Field(default_factory=PromptsConfig)
    hub: HubConfig = Field(default_factory=HubConfig)
    data: PromptDatasetConfig = Field(default_factory=PromptDatasetConfig)
    arithmetic: ArithmeticConfig = Field(default_factory=ArithmeticConfig)
    gridworld: GridworldConfig = Field(default_factory=GridworldConfig)
    sokoban: SokobanConfig = Field(default_factory=SokobanConfig)
    maze: MazeConfig = Field(default_factory=MazeConfig)
    calculator: CalculatorConfig = Field(default_factory=CalculatorConfig)
    slates: SlatesConfig = Field(default_factory=SlatesConfig)
    grail: GrailConfig = Field(default_factory=GrailConfig)

    @model_validator(mode="before")
    @classmethod
    def _registered_sections(cls, data: Any) -> Any:
        """Registered extra sections are validated by their class; other unknown sections are errors."""
        if not isinstance(data, dict):
            return data
        unknown = [k for k in data if k not in cls.model_fields and k not in EXTRA_SECTIONS]
        if unknown:
            raise ValueError(f"unknown section '{unknown[0]}'; sections: {sorted(SECTIONS)}")
        data = dict(data)
        for name, section_cls in EXTRA_SECTIONS.items():
            value = data.get(name) or {}
            data[name] = value if isinstance(value, section_cls) else section_cls.model_validate(value)
        return data


SECTIONS: dict[str, type[Section]] = {name: field.annotation for name, field in Config.model_fields.items()}  # type: ignore[misc]
# flat field name -> section; names are unique by construction (checked here).
FIELD_SECTION: dict[str, str] = {}
for _section, _cls in SECTIONS.items():
    for _name in _cls.model_fields:
        assert _name not in FIELD_SECTION, f"duplicate config field {_name}"
        FIELD_SECTION[_name] = _section


def register_section(name: str, section: type[Section]) -> None:
    """Add a section ``cfg.<name>`` (a task's own fields: ``register_task(..., section=...)``) whose
    fields work as flags, env vars and recipe keys like any other; field names stay unique."""
    if name in SECTIONS and SECTIONS[name] is not section:
        raise ValueError(f"config section '{name}' is already registered")
    for field_name in section.model_fields:
        owner = FIELD_SECTION.get(field_name)
        if owner is not None and owner != name:
            raise ValueError(f"config section '{name}': field '{field_name}' already belongs to section '{owner}'")
    SECTIONS[name] = EXTRA_SECTIONS[name] = section
    for field_name in section.model_fields:
        FIELD_SECTION[field_name] = name


def flat_dict(cfg: Config) -> dict[str, Any]:
    return {k: v for section in cfg.model_dump().values() for k, v in section.items()}
