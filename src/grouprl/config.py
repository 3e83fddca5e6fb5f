"""Run configuration: one pydantic model per section.

Precedence, lowest first: field defaults < YAML recipe (``--config``) < environment
variables < command-line flags. Every field name is unique across sections, so a
flag is just ``--field_name`` (as in TRL) and a recipe may be nested by section or flat.
Unknown keys and bad values fail here, before any model loads.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=())


class ModelConfig(Section):
    model_name_or_path: str | None = Field(
        None, description="Hub id or local dir of a causal LM; empty = build the task's tiny model and SFT-warm it")
    torch_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="auto = bfloat16 on CUDA, float32 elsewhere")
    use_peft: bool = Field(False, description="train LoRA adapters; the reference is the base with adapters off")
    lora_r: int = Field(16, gt=0, description="LoRA rank")
    lora_alpha: int = Field(32, gt=0, description="LoRA alpha")
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="LoRA dropout")
    lora_target_modules: list[str] = Field(["q_proj", "k_proj", "v_proj", "o_proj"], description="modules to adapt")
    tiny_hidden_size: int = Field(128, gt=0, description="tiny model: hidden size")
    tiny_num_layers: int = Field(4, gt=0, description="tiny model: decoder layers")
    tiny_num_heads: int = Field(4, gt=0, description="tiny model: attention heads")


class RewardSpec(Section):
    """One reward in a recipe: ``{name: accuracy, weight: 2, options: {max_len: 500}}``."""

    name: str = Field(description="built-in name, 'path/to/file.py:function' or 'package.module:function'")
    weight: float = Field(1.0, description="share of the score (normalized unless normalize_weights is false)")
    options: dict[str, Any] = Field(default_factory=dict, description="keyword options bound to the function")


class TaskConfig(Section):
    task: str = Field("arithmetic", description="where episodes come from: a registered task (tasks/registry.py): "
                                                "arithmetic, gsm8k, gridworld, sokoban, calculator, ...")
    dataset_name_or_path: str | None = Field(None, description="gsm8k: hub id (openai/gsm8k) or a dir with "
                                                               "train.jsonl/test.jsonl")
    dataset_config: str = Field("main", description="hub dataset config")
    n_train: int | None = Field(
        None, gt=0, description="use the first N training rows; environments: N training seeds (empty = task default)")
    system_prompt: str | None = Field(None, description="override the task's system message")
    arithmetic_digits: int = Field(2, ge=1, le=6, description="arithmetic: digits per operand")
    arithmetic_operands: int = Field(2, ge=2, le=6, description="arithmetic: operands per question")
    arithmetic_reverse_answer: bool = Field(
        False, description="arithmetic: answer written least-significant digit first (carries flow left to right)")
    arithmetic_operators: str = Field("+", pattern=r"^[+\-]+$", description="arithmetic: operators to draw from")
    rewards: list[str | RewardSpec] | None = Field(
        None, description="reward functions: names, or {name, weight, options} (empty = the task's default)")
    reward_weights: list[float] | None = Field(None, description="one weight per reward function (default all 1)")
    normalize_weights: bool = Field(True, description="divide the weights by their sum")
    sandbox_user_rewards: bool = Field(False, description="run 'path/to/file.py:function' rewards in the sandbox")
    max_reward_error_fraction: float = Field(
        0.1, ge=0, le=1, description="stop when more than this share of a batch fails in reward functions")
    reward_timeout: float = Field(60.0, ge=0, description="seconds a reward call may take, then errors (0 = no limit)")
    default_step_reward: float = Field(
        0.0, description="step reward for steps a reward function's step_outputs do not name")
    grid_size: int = Field(4, ge=2, le=12, description="gridworld: the map is N x N")
    hole_fraction: float = Field(0.2, ge=0, lt=1, description="gridworld: share of cells that are holes")
    slippery: float = Field(0.0, ge=0, le=1, description="gridworld: chance a move slides sideways")
    sokoban_size: int = Field(6, ge=4, le=10, description="sokoban: the room is N x N (walls included)")
    sokoban_boxes: int = Field(1, ge=1, le=4, description="sokoban: boxes (and targets)")
    calculator_questions: Literal["arithmetic", "gsm8k"] = Field(
        "arithmetic", description="calculator: where the questions come from")
    calculator_max_calls: int = Field(8, gt=0, description="calculator: calls allowed before the episode is cut")

    @field_validator("task")
    @classmethod
    def _known_task(cls, name: str) -> str:
        from grouprl.tasks.registry import TASKS

        if name not in TASKS:
            raise ValueError(f"one of {', '.join(repr(n) for n in TASKS)}")
        return name


class RolloutConfig(Section):
    num_generations: int = Field(8, ge=2, description="K completions per prompt (the group size)")
    batch_size: int = Field(16, gt=0, description="prompts per training step (groups per step)")
    max_new_tokens: int | None = Field(
        None, gt=0, description="completion length cap per step (empty = the task's: arithmetic 6, gsm8k 512, "
                                "gridworld/sokoban 24, calculator 48)")
    generation_backend: str = Field(
        "hf", description="generation engine (BACKENDS): hf = transformers generate, vllm = a colocated engine, "
                          "vllm_server = a `grouprl vllm-serve` process")
    temperature: float = Field(1.0, gt=0, description="sampling temperature (also scales logits in the loss)")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling")
    top_k: int = Field(0, ge=0, description="top-k sampling (0 = off)")
    generation_batch_size: int = Field(256, gt=0, description="sequences per generate call")
    max_episode_steps: int = Field(10, gt=0, description="environments: step cap per episode")
    history_length: int = Field(2, ge=0, description="environments: past (observation, action) pairs in the prompt")
    action_pattern: str = Field(
        r"<action>(.*?)</action>",
        description="environments: regex whose first group is the action ('' = the whole completion)")
    invalid_action_penalty: float = Field(
        0.1, ge=0, description="environments: reward subtracted for an unparsable or inadmissible action")
    invalid_penalty: Literal["in_returns", "on_step"] = Field("in_returns", description="environments: penalty as a "
        "step reward (in returns and score), or on the invalid step's advantage alone (on_step: verl-agent)")
    show_admissible_actions: bool = Field(True, description="environments: list admissible actions in the prompt")
    env_workers: int = Field(1, ge=1, description="environments: N > 1 runs them in N Ray actors")
    ray_address: str | None = Field(None, description="Ray cluster to connect to (empty = start a local one)")


class AlgorithmConfig(Section):
    advantage: str = Field(
        "grpo", description="advantage estimator: grpo, dr_grpo, rloo, gigpo, or your own as "
                            "'path/to/file.py:function' / 'package.module:function'")
    advantage_options: dict[str, Any] = Field(default_factory=dict, description="the estimator's keyword options "
        "(undeclared = error); built-ins read scale_rewards, gamma, step_advantage_weight, gigpo_norm, episode_stats")
    scale_rewards: Literal["group", "batch", "none"] = Field("group", description="grpo: divide by group/batch std")
    loss_type: Literal["grpo", "bnpo", "dapo", "dr_grpo"] = Field("dapo", description="token aggregation of the loss")
    epsilon_low: float = Field(0.2, ge=0, description="PPO clip: lower bound 1 - epsilon_low")
    epsilon_high: float = Field(0.2, ge=0, description="PPO clip: upper bound 1 + epsilon_high")
    beta: float = Field(0.0, ge=0, description="KL-to-reference coefficient (k3 estimator); 0 = no reference model")
    num_iterations: int = Field(1, ge=1, description="mu: optimizer passes over one generation batch")
    mask_truncated_completions: bool = Field(False, description="drop completions that hit max_new_tokens")
    gamma: float = Field(0.95, ge=0, le=1, description="gigpo: discount of step returns")
    step_advantage_weight: float = Field(1.0, ge=0, description="gigpo: omega, weight of the step-level advantage")
    gigpo_norm: Literal["mean_norm", "mean_std_norm"] = Field(
        "mean_norm", description="gigpo: F = 1 (mean_norm) or std + 1e-6 (mean_std_norm)")
    episode_stats: Literal["episode", "per_step"] = Field(
        "episode", description="gigpo: episode-level mean/std over episodes, or over steps (verl-agent)")
    anchor_mode: Literal["exact", "similarity"] = Field(
        "exact", description="gigpo: group steps by equal anchor states, or by text similarity")
    similarity_threshold: float = Field(0.95, gt=0, le=1, description="gigpo: similarity mode's threshold")
    state_key: str | None = Field(
        None, description="gigpo: 'module:function' or 'file.py:function' mapping an anchor state to its key")


class TrainConfig(Section):
    output_dir: str = Field("outputs/grouprl", description="where everything of the run is written")
    max_steps: int = Field(400, gt=0, description="training steps (one rollout batch each)")
    learning_rate: float = Field(3e-4, gt=0, description="AdamW learning rate")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    adam_beta2: float = Field(0.999, gt=0, lt=1, description="AdamW beta2")
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = Field(
        "linear", description="decay to 0 over the run, after warmup")
    warmup_steps: int = Field(0, ge=0, description="linear warmup optimizer steps")
    gradient_accumulation_steps: int = Field(1, gt=0, description="micro-batches per optimizer step")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping")
    seed: int = Field(0, description="seeds data order, sampling and init")
    save_steps: int = Field(0, ge=0, description="checkpoint every N steps (0 = only at the end)")
    resume_from_checkpoint: str | None = Field(None, description="checkpoint dir to continue from, or 'last'")
    overwrite_output_dir: bool = Field(False, description="start afresh in a non-empty output_dir (else refused)")
    max_nonfinite_updates: int = Field(3, ge=0, description="stop after N updates skipped for a non-finite loss/grad")
    sft_steps: int = Field(1500, ge=0, description="tiny default: most SFT warm-up steps")
    sft_target_accuracy: float | None = Field(
        0.2, gt=0, le=1, description="tiny default: stop SFT early once greedy accuracy on held-back training rows "
                                     "reaches this (checked every 10 steps; empty = run all sft_steps); "
                                     "environments with expert demonstrations: sampled success rate")
    sft_learning_rate: float = Field(3e-3, gt=0, description="tiny default: SFT learning rate")
    sft_batch_size: int = Field(64, gt=0, description="tiny default: SFT batch size")
    sft_demonstrations: Literal["random", "expert"] = Field(
        "random", description="environments: SFT on random admissible moves (format only) or BFS-optimal moves")
    sft_demo_episodes: int = Field(300, gt=0, description="environments: episodes played to make SFT demonstrations")


class EvalConfig(Section):
    n_eval: int = Field(200, ge=0, description="held-out examples evaluated before and after training (0 = skip)")
    eval_greedy: bool = Field(True, description="greedy decoding (else sample at the rollout temperature)")
    eval_batch_size: int = Field(200, gt=0, description="sequences per eval generate call")
    eval_max_new_tokens: int | None = Field(None, gt=0, description="eval completion cap (empty = max_new_tokens)")


class LoggingConfig(Section):
    report_to: Literal["none", "wandb", "trackio", "tensorboard"] = Field("none", description="also log to a tracker")
    wandb_project: str = Field("grouprl", description="W&B / trackio project (WANDB_PROJECT, TRACKIO_PROJECT win)")
    run_name: str | None = Field(None, description="default grpo_{model}_K{K}_steps{N} (WANDB_NAME wins)")
    logging_steps: int = Field(10, gt=0, description="print metrics every N steps (all go to metrics.jsonl)")
    log_rollouts: bool = Field(True, description="write every rollout to rollouts/rollouts.jsonl")
    save_trajectories_every: int = Field(
        10, ge=0, description="write every step of the batch to trajectories/step_N.jsonl every N steps (0 = never)")


class RuntimeConfig(Section):
    device: Literal["auto", "cpu", "cuda", "mps"] = Field("auto", description="auto = cuda, else mps, else cpu")
    num_threads: int | None = Field(None, gt=0, description="torch CPU threads (empty = torch default)")
    gradient_checkpointing: bool = Field(False, description="recompute activations in the backward: less memory")
    reshard_on_resume: bool = Field(False, description="allow resuming with another process count (new RNG streams)")


# Sections that tasks (or other capabilities) add: name -> class (see register_section).
EXTRA_SECTIONS: dict[str, type[Section]] = {}


class Config(Section):
    model_config = ConfigDict(extra="allow", validate_assignment=True, protected_namespaces=())
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)

    @model_validator(mode="before")
    @classmethod
    def _registered_sections(cls, data: Any) -> Any:
        """Registered extra sections (a task's own fields) are validated by their class; others are errors."""
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

    @model_validator(mode="after")
    def _registered_names(self) -> "Config":
        """Estimator and backend names against their registries (only a valid config imports them)."""
        from grouprl.algos.advantages import ADVANTAGES
        from grouprl.rollout.generation import BACKENDS

        for key, value, known, section in [
            ("advantage", self.algorithm.advantage, ADVANTAGES, "algorithm"),
            ("generation_backend", self.rollout.generation_backend, BACKENDS, "rollout"),
        ]:
            if value not in known and not (key == "advantage" and ":" in value):
                own = " or 'path/to/file.py:function' / 'package.module:function'" if key == "advantage" else ""
                raise ValueError(f"config key '{key}' (section {section}): got {value!r}; expected one of "
                                 f"{', '.join(repr(n) for n in known)}{own}")
        return self

    @model_validator(mode="after")
    def _task_defaults(self) -> "Config":
        if self.rollout.max_new_tokens is None:  # bypass validate_assignment (it would re-run this validator)
            from grouprl.tasks.registry import task_spec

            self.rollout.__dict__["max_new_tokens"] = task_spec(self.task.task).max_new_tokens
        return self


SECTIONS: dict[str, type[Section]] = {
    name: field.default_factory().__class__ for name, field in Config.model_fields.items()  # type: ignore[misc]
}
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


# The seed script's environment variables (simple_grpo) and grouprl's own GROUPRL_<FIELD>.
ENV_VARS: dict[str, str] = {
    "MODEL_NAME": "model_name_or_path",
    "OUTPUT_DIR": "output_dir",
    "MAX_STEPS": "max_steps",
    "NUM_GENERATIONS": "num_generations",
    "MAX_NEW_TOKENS": "max_new_tokens",
    "BATCH_SIZE": "batch_size",
    "GRAD_ACCUM": "gradient_accumulation_steps",
    "LR": "learning_rate",
    "N_TRAIN": "n_train",
    "N_EVAL": "n_eval",
    "SEED": "seed",
}


class ConfigError(ValueError):
    """A recipe, environment variable or flag that names an unknown key or holds a bad value."""


def _nest(flat: dict[str, Any], origin: str) -> dict[str, dict[str, Any]]:
    nested: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        if key not in FIELD_SECTION:
            raise ConfigError(f"{origin}: unknown key '{key}' (value {value!r}); known keys: {sorted(FIELD_SECTION)}")
        nested.setdefault(FIELD_SECTION[key], {})[key] = value
    return nested


def read_recipe(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Read a YAML recipe, nested by section (``train: {max_steps: 5}``) or flat (``max_steps: 5``)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--config: no such recipe file '{p}'")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as err:
        where = f" at line {err.problem_mark.line + 1}" if getattr(err, "problem_mark", None) else ""
        raise ConfigError(f"{p}: YAML syntax error{where}: {getattr(err, 'problem', None) or err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of sections or keys, got {type(data).__name__}")
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"{p}: section '{key}' must be a mapping, got {value!r}")
            for sub, subvalue in value.items():
                if FIELD_SECTION.get(sub) != key:
                    raise ConfigError(
                        f"{p}: unknown key '{key}.{sub}' (value {subvalue!r}); "
                        f"section '{key}' has: {sorted(SECTIONS[key].model_fields)}"
                    )
                flat[sub] = subvalue
        else:
            flat[key] = value
    from grouprl.config_openr1 import translate_recipe  # open-r1's flat keys -> grouprl's (errors name the key)
    return _nest(translate_recipe(flat, FIELD_SECTION, str(p)), str(p))


def env_overrides(environ: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Seed variables (MODEL_NAME, LR, ...) and GROUPRL_<FIELD> for any field."""
    environ = dict(os.environ if environ is None else environ)
    flat: dict[str, Any] = {}
    for var, field in ENV_VARS.items():
        if environ.get(var, "") != "":
            flat[field] = environ[var]
    for var, value in environ.items():
        if var.startswith("GROUPRL_") and value != "":
            key = var[len("GROUPRL_"):].lower()
            if key not in FIELD_SECTION:
                raise ConfigError(f"environment variable {var}: unknown key '{key}' (value {value!r})")
            flat[key] = _parse_env_value(value)
    return _nest(flat, "environment")


def _parse_env_value(value: str) -> Any:
    # YAML scalars give lists and booleans from the environment ("[a, b]", "true").
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


def _merge(base: dict[str, dict[str, Any]], over: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {k: dict(v) for k, v in base.items()}
    for section, values in over.items():
        out.setdefault(section, {}).update(values)
    return out


def build_config(
    recipe: str | os.PathLike | None = None,
    cli: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Config:
    """Defaults < recipe < environment < CLI, validated as one model."""
    import grouprl.tasks  # noqa: F401 - the registered tasks (and the config sections they add)

    merged: dict[str, dict[str, Any]] = {}
    for layer in (read_recipe(recipe) if recipe else {}, env_overrides(environ), _nest(cli or {}, "command line")):
        merged = _merge(merged, layer)
    for name, section_cls in EXTRA_SECTIONS.items():  # a task's section: its errors named like the others'
        try:
            merged[name] = section_cls.model_validate(merged.get(name, {}))
        except ValidationError as err:
            raise ConfigError(_describe(err, name)) from None
    try:
        return Config.model_validate(merged)
    except ValidationError as err:
        raise ConfigError(_describe(err)) from None


def _describe(err: ValidationError, section: str | None = None) -> str:
    lines = []
    for e in err.errors():
        if not e["loc"]:  # a whole-config check: its message names the key itself
            lines.append(e["msg"].removeprefix("Value error, "))
            continue
        loc = ([section] if section else []) + [str(x) for x in e["loc"]]
        key = loc[1] if len(loc) > 1 else loc[0]
        value = e.get("input")
        lines.append(f"config key '{key}' (section {loc[0]}): got {value!r}; expected {e['msg'].lower()}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def flat_dict(cfg: Config) -> dict[str, Any]:
    return {k: v for section in cfg.model_dump().values() for k, v in section.items()}
