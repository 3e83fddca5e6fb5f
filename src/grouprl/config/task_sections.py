"""Each built-in task's own section: ``cfg.arithmetic``, ``cfg.gridworld``, ``cfg.sokoban``, ``cfg.maze``,
``cfg.calculator``, ``cfg.data`` (prompt datasets), ``cfg.slates`` and ``cfg.grail`` (GRAIL's switches).

Flags, environment variables and recipe keys are the field names, as for every section; a recipe
may nest a field under its section or under the one it came from (``task: {grid_size: 6}``,
``slates: {gail_use: true}``). A task that is not built in brings its section with
``register_task(..., section=(name, cls))``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from grouprl.config.base import Section


class ArithmeticConfig(Section):
    arithmetic_digits: int = Field(2, ge=1, le=6, description="arithmetic: digits per operand")
    arithmetic_operands: int = Field(2, ge=2, le=6, description="arithmetic: operands per question")
    arithmetic_reverse_answer: bool = Field(
        False, description="arithmetic: answer written least-significant digit first (carries flow left to right)"
    )
    arithmetic_operators: str = Field("+", pattern=r"^[+\-]+$", description="arithmetic: operators to draw from")
    arithmetic_prompt: str | None = Field(
        None,
        description="arithmetic: the user turn, '{question}' standing for the sum written with spaces "
        "('Compute {question}. Reply with only the number.'); empty = the bare sum '47+38'",
    )
    arithmetic_answer: Literal["exact", "last_number"] = Field(
        "exact",
        description="arithmetic: how the answer is read: the whole completion is the number (exact), or "
        "the last number in the reply (last_number: chat models that write '47 + 38 = 85')",
    )

    former_sections = ("task",)

    @field_validator("arithmetic_prompt")
    @classmethod
    def _names_the_question(cls, template: str | None) -> str | None:
        if template is not None and "{question}" not in template:
            raise ValueError("a template containing '{question}' (where the sum goes)")
        return template


class GridworldConfig(Section):
    grid_size: int = Field(4, ge=2, le=12, description="gridworld: the map is N x N")
    hole_fraction: float = Field(0.2, ge=0, lt=1, description="gridworld: share of cells that are holes")
    slippery: float = Field(0.0, ge=0, le=1, description="gridworld: chance a move slides sideways")

    former_sections = ("task",)


class MazeConfig(Section):
    maze_size: int = Field(6, ge=3, le=12, description="maze: the map is N x N")
    maze_wall_fraction: float = Field(0.3, ge=0, lt=1, description="maze: share of cells that are walls")
    maze_min_path: int = Field(10, ge=1, description="maze: fewest moves from start to goal")
    maze_view: Literal["map", "coordinates"] = Field(
        "map", description="maze: the observation: the drawn map, or the maze's number and the agent's and goal's cells"
    )
    maze_layouts: int = Field(0, ge=0, description="maze: seed s plays the maze of seed s mod N (0: its own)")

    former_sections = ("task",)


class SokobanConfig(Section):
    sokoban_size: int = Field(6, ge=4, le=10, description="sokoban: the room is N x N (walls included)")
    sokoban_boxes: int = Field(1, ge=1, le=4, description="sokoban: boxes (and targets)")

    former_sections = ("task",)


class CalculatorConfig(Section):
    calculator_questions: Literal["arithmetic", "gsm8k"] = Field(
        "arithmetic", description="calculator: where the questions come from"
    )
    calculator_max_calls: int = Field(8, gt=0, description="calculator: calls allowed before the episode is cut")

    former_sections = ("task",)


class MixtureDataset(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="hub id, local dir or data file")
    config: str | None = Field(None, description="hub dataset config")
    split: str = Field("train", description="split to take rows from")
    columns: list[str] | None = Field(None, description="columns to keep (all when empty)")
    weight: float | None = Field(None, gt=0, le=1, description="fraction of the rows kept (all when empty)")


class DatasetMixture(BaseModel):
    """open-r1's ``dataset_mixture`` (loaded by ``data/mixture.py``)."""

    model_config = ConfigDict(extra="forbid")

    datasets: list[MixtureDataset] = Field(min_length=1)
    seed: int = 0
    test_split_size: float | int | None = Field(None, gt=0, description="share (< 1) or count held out as test")


class PromptDatasetConfig(Section):
    dataset_train_split: str = Field("train", description="prompt_dataset: split to train on")
    dataset_test_split: str | None = Field(
        None, description="prompt_dataset: split to evaluate on (empty = none, or test_split_size)"
    )
    test_split_size: float | int | None = Field(
        None, gt=0, description="prompt_dataset: hold out this share (< 1) or count of the training split for eval"
    )
    dataset_prompt_column: str = Field(
        "prompt", description="prompt_dataset: column with the prompt (a string or chat messages)"
    )
    dataset_solution_column: str | None = Field(
        None, description="prompt_dataset: column with the ground truth (empty = 'solution' or 'answer' when present)"
    )
    dataset_mixture: DatasetMixture | None = Field(
        None,
        description="prompt_dataset: open-r1 mixture {datasets: [{id, config, split, columns, weight}], seed, "
        "test_split_size}; weight = fraction of that dataset kept",
    )
    max_bad_row_fraction: float = Field(
        0.05, ge=0, le=1, description="prompt_dataset: stop when more than this share of a split's rows is bad"
    )
    correct_reward: str | None = Field(
        None, description="prompt_dataset: the reward whose 1.0 means correct (empty = the first reward)"
    )


class SlatesConfig(Section):
    slate_issue: Literal["gun_control", "minimum_wage"] = Field(
        "gun_control", description="slates: which issue (picks the default hub dataset)"
    )
    slate_train_split: str = Field("train", description="slates: training split")
    slate_eval_split: str = Field("validation", description="slates: evaluation split")
    slate_solution_column: str = Field("next_video_id", description="slates: the gold next-video id column")
    slate_synthetic_validation: int = Field(300, gt=0, description="slates, synthetic data: validation rows")
    slate_synthetic_max_prior: int = Field(4, ge=0, description="slates, synthetic data: most earlier videos")
    slate_synthetic_seed: int = Field(0, description="slates, synthetic data: data seed")
    slate_tiny_tokenizer: Literal["word", "char"] = Field(
        "word", description="slates: the tiny model's tokenizer (word: ~4x shorter prompts)"
    )


class GrailConfig(Section):
    """GRAIL's switches (the discriminator reward and the mixer). Each is also set by the original
    launchers' environment variable, its name in upper case (``GAIL_LR=1e-4``), which wins over
    the recipe as there."""

    gail_use: bool = Field(True, description="GRAIL: add the GAIL discriminator reward and the mixer (0 = plain GRPO)")
    gail_train: bool = Field(True, description="GRAIL: train the discriminator online (0 = score only)")
    gail_weight: float = Field(0.5, description="GRAIL: the discriminator's initial weight against the base rewards' 1")
    gail_alpha: float = Field(1.0, description="GRAIL: discriminator reward = alpha * P(expert)")
    gail_lr: float = Field(2e-5, description="GRAIL: discriminator AdamW learning rate")
    gail_disc_model: str = Field(
        "distilbert-base-uncased", description="GRAIL: the discriminator: hub id or local dir ('tiny' = build one)"
    )
    gail_device: str = Field(
        "auto", description="GRAIL: discriminator device (auto = this process's CUDA device, else cpu)"
    )
    gail_eval_mode: bool = Field(
        False, description="GRAIL: discriminator and mixer frozen for the whole run (evaluation freezes them anyway)"
    )
    grail_weight_lr: float = Field(0.05, description="GRAIL: the mixer's Adam learning rate")
    grail_disc_show_ids: bool = Field(False, description="GRAIL: video ids in the discriminator's text")
    grail_max_history: int = Field(12, description="slates: watched videos shown in the prompt (0 or less = all)")
    grail_show_ids: bool = Field(False, description="slates: video ids in the prompt")
    pureacc_allow_bare_number: bool = Field(
        False, description="slates: a completion without <answer> tags may be a bare option number"
    )
    gail_replay: int = Field(0, description="GRAIL: discriminator replay buffer size (0 = off)")
    gail_minibatch: int = Field(0, description="GRAIL: replay minibatch size (0 = the batch's size)")
    gail_updates: int = Field(1, description="GRAIL: discriminator steps per batch")

    former_sections = ("slates",)


# The original launchers' variable names: GAIL_USE, GAIL_LR, ..., PUREACC_ALLOW_BARE_NUMBER.
GrailConfig.env_aliases = {name.upper(): name for name in GrailConfig.model_fields}
