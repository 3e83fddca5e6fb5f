"""open-r1 / TRL recipe keys onto grouprl's config: a recipe written for open-r1 runs unchanged.

open-r1 recipes are flat YAML in TRL's ``GRPOConfig`` names plus open-r1's script arguments. Each
key here is either the same as grouprl's (``learning_rate``, ``seed``, ``beta``...), renamed
(``max_completion_length`` -> ``max_new_tokens``), converted (``per_device_train_batch_size``:
completions per step, into grouprl's ``batch_size``: prompts per step), or accepted because it
asks for what grouprl does anyway (``logging_strategy: steps``). Every other key is an error
that names it: TRL 0.18's parser silently dropped unknown keys, so a dozen settings of the GRAIL
project's recipes never took effect.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from grouprl.config.base import ConfigError
from grouprl.config.trl_keys import TRL_OBJECTIVE_KEYS, TRL_ONLY, check_trl_only, trl_keyed, trl_objective

# open-r1 key -> grouprl key, same value.
RENAMED = {
    "dataset_name": "dataset_name_or_path",
    "max_completion_length": "max_new_tokens",
    "per_device_eval_batch_size": "eval_batch_size",
    "log_completions": "log_rollouts",
    "evaluation_strategy": "eval_strategy",  # TRL's name before 4.46
    "vllm_gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "vllm_server_host": "vllm_server_host",
    "vllm_server_port": "vllm_server_port",
    "vllm_enable_sleep_mode": "vllm_sleep_during_update",
}

# open-r1's reward_funcs names -> grouprl's reward registry names. Names not listed pass through
# (grouprl names, 'file.py:function', 'package.module:function').
REWARD_NAMES = {
    "accuracy": "math_accuracy",
    "format": "format",
    "tag_count": "tag_count",
    "reasoning_steps": "reasoning_steps",
    "cosine": "cosine_length",
    "repetition_penalty": "repetition_penalty",
    "length": "length",
    "soft_overlong_punishment": "soft_overlong",
}
# open-r1 rewards whose contract (E2B / Piston / Morph providers, verification_info) grouprl does not run.
NO_EQUIVALENT = {"code", "ioi_code", "cf_code", "code_format", "binary_code"}

# open-r1 script argument -> (reward it configures, grouprl option name).
REWARD_OPTIONS = {
    "cosine_min_value_wrong": ("cosine_length", "min_value_wrong"),
    "cosine_max_value_wrong": ("cosine_length", "max_value_wrong"),
    "cosine_min_value_correct": ("cosine_length", "min_value_correct"),
    "cosine_max_value_correct": ("cosine_length", "max_value_correct"),
    "cosine_max_len": ("cosine_length", "max_len"),
    "repetition_n_grams": ("repetition_penalty", "ngram_size"),
    "repetition_max_penalty": ("repetition_penalty", "max_penalty"),
    "max_completion_len": ("soft_overlong", "max_completion_len"),
    "soft_punish_cache": ("soft_overlong", "cache_len"),
}

# Keys that ask for what grouprl does anyway: accepted with these values only, no effect.
SAME_BEHAVIOUR: dict[str, set[Any]] = {
    "logging_strategy": {"steps"},  # grouprl logs every step to metrics.jsonl, prints every logging_steps
    "logging_first_step": {True, False},  # the first step is always in metrics.jsonl
    "log_level": {"passive", "info", "warning"},  # LOGLEVEL=DEBUG shows grouprl's debug lines
    "remove_unused_columns": {False},  # every column is kept and reaches the rewards
    "ddp_find_unused_parameters": {False, None},
}


class RecipeKeyError(ConfigError):
    """A recipe key grouprl does not support, or a value it cannot translate."""


def _err(origin: str, key: str, value: Any, why: str) -> RecipeKeyError:
    return RecipeKeyError(f"{origin}: key '{key}' (value {value!r}): {why}")


def _report_to(value: Any, origin: str) -> str:
    sinks = [value] if isinstance(value, str) else list(value or [])
    sinks = [s for s in sinks if s not in ("none", None)]
    if not sinks:
        return "none"
    if len(sinks) == 1:
        return sinks[0]  # grouprl validates the name (none, wandb, ...)
    raise _err(origin, "report_to", value, "grouprl reports to one sink besides metrics.jsonl")


def _scale_rewards(value: Any) -> Any:
    if value is True:
        return "group"
    if value is False:
        return "none"
    return value


def _rewards(names: Any, options: dict[str, dict[str, Any]], origin: str) -> list[Any]:
    if isinstance(names, str):
        names = [names]
    out = []
    for name in names or []:
        if name in NO_EQUIVALENT:
            raise _err(
                origin,
                "reward_funcs",
                names,
                f"open-r1's reward '{name}' has no grouprl equivalent (its "
                "code runs on remote providers); use grouprl's 'code_execution' or a 'file.py:function'",
            )
        grouprl_name = REWARD_NAMES.get(name, name)
        opts = options.pop(grouprl_name, None)
        out.append({"name": grouprl_name, "options": opts} if opts else grouprl_name)
    return out


def translate_recipe(flat: dict[str, Any], known_keys: Iterable[str], origin: str = "recipe") -> dict[str, Any]:
    """grouprl's flat keys for a flat recipe in grouprl's and/or open-r1's names.

    ``known_keys``: grouprl's config field names. A key that is neither one of them nor an
    open-r1 key below raises :class:`RecipeKeyError` naming it; so does an open-r1 key whose
    grouprl counterpart this build does not have (e.g. ``use_vllm`` without a vLLM backend).
    """
    known = set(known_keys)
    out: dict[str, Any] = {}
    derived: dict[str, tuple[str, Any]] = {}  # grouprl key -> (from which key, value); explicit keys win

    def put(source: str, key: str, value: Any, explicit: bool = False) -> None:
        if key not in known:
            raise _err(origin, source, value, f"maps to grouprl's '{key}', which this grouprl does not have")
        if explicit:
            out[key] = value
        else:
            derived[key] = (source, value)

    def epsilon(value: Any) -> None:  # TRL's one clip width: both of grouprl's bounds (epsilon_high derived)
        put("epsilon", "epsilon_low", value, True)
        put("epsilon", "epsilon_high", value)

    options: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        if key in REWARD_OPTIONS:
            reward, option = REWARD_OPTIONS[key]
            options.setdefault(reward, {})[option] = value
    handlers: dict[str, Callable[[Any], Any]] = {
        "reward_funcs": lambda v: put("reward_funcs", "rewards", _rewards(v, options, origin), True),
        "report_to": lambda v: put("report_to", "report_to", _report_to(v, origin), True),
        "scale_rewards": lambda v: put("scale_rewards", "scale_rewards", _scale_rewards(v), True),
        # TRL's max_steps: -1 means "num_train_epochs decides" (kept, and rejected, without epochs)
        "max_steps": lambda v: (
            None if v == -1 and "num_train_epochs" in flat else put("max_steps", "max_steps", v, True)
        ),
        "epsilon": epsilon,
        "epsilon_high": lambda v: (
            None if v is None else put("epsilon_high", "epsilon_high", v, True)
        ),  # null: epsilon's
        "bf16": lambda v: put("bf16", "torch_dtype", "bfloat16") if v else None,
        "fp16": lambda v: put("fp16", "torch_dtype", "float16") if v else None,
        "use_vllm": lambda v: put("use_vllm", "generation_backend", _backend(v, flat, origin), True),
        "vllm_mode": lambda v: _backend(flat.get("use_vllm", False), flat, origin),  # checked; use_vllm applies it
        # null: the dataset's default config (TRL's meaning), as when the key is absent
        "dataset_config": lambda v: None if v is None else put("dataset_config", "dataset_config", v, True),
        "vllm_max_model_length": lambda v: (
            None if v is None else put("vllm_max_model_length", "vllm_max_model_len", v, True)
        ),
        "do_eval": lambda v: None if v else put("do_eval", "eval_strategy", "no"),
        "hub_strategy": lambda v: _hub_strategy(v, origin, put),
        "per_device_train_batch_size": lambda v: None,  # resolved below: it needs num_generations
        "dataset_configs": lambda v: put("dataset_configs", "dataset_config", _single(v, origin), True),
        "gradient_checkpointing": lambda v: _optional_feature("gradient_checkpointing", v, known, put),
        # grouprl checkpoints with use_reentrant=False (train/learner.py): exactly that is accepted
        "gradient_checkpointing_kwargs": lambda v: (
            None
            if v in (None, {}, {"use_reentrant": False})
            else _optional_feature(
                "gradient_checkpointing_kwargs", v, known, put, off=flat.get("gradient_checkpointing")
            )
        ),
    }
    for key in TRL_OBJECTIVE_KEYS:
        handlers[key] = lambda v: None  # read together below: they name a loss, its options, its correction
    if flat.get("loss_type") == "cispo":  # TRL's epsilon / epsilon_high are CISPO's cap (trl_keys.py)
        handlers["epsilon"] = handlers["epsilon_high"] = lambda v: None
    for key, value in flat.items():
        if key in REWARD_OPTIONS:
            continue
        if key in handlers:
            handlers[key](value)
        elif key in RENAMED:
            put(key, RENAMED[key], value, True)
        elif key in SAME_BEHAVIOUR:
            if value not in SAME_BEHAVIOUR[key]:
                raise _err(
                    origin,
                    key,
                    value,
                    f"grouprl supports only {sorted(SAME_BEHAVIOUR[key], key=str)} (what it does anyway)",
                )
        elif key in known:
            out[key] = value
        elif key in TRL_ONLY:
            check_trl_only(key, value, lambda k, v, why: _err(origin, k, v, why))
        else:
            raise _err(
                origin,
                key,
                value,
                "not a grouprl key and not an open-r1/TRL key grouprl supports (see docs/data.md, 'Recipes')",
            )
    if options:
        reward = next(iter(options))
        raise _err(
            origin,
            next(k for k, (r, _) in REWARD_OPTIONS.items() if r == reward and k in flat),
            options[reward],
            f"configures reward '{reward}', which reward_funcs does not name: it would never take effect",
        )
    if "per_device_train_batch_size" in flat:
        _batch_size(flat, out, origin, put)
    is_trl = trl_keyed(flat, known, set(handlers) | set(RENAMED) | set(SAME_BEHAVIOUR) | set(REWARD_OPTIONS))
    trl_objective(flat, out, lambda s, k, v: put(s, k, v, True), lambda k, v, why: _err(origin, k, v, why), is_trl)
    for key, (_, value) in derived.items():
        out.setdefault(key, value)
    named_data = {"dataset_name", "dataset_name_or_path", "dataset_mixture"} & set(flat)
    if named_data and "task" not in flat and "task" in known:
        out["task"] = "prompt_dataset"  # open-r1 recipes name a dataset, never a task
    return out


def _optional_feature(key: str, value: Any, known: set[str], put, off: Any = None) -> None:
    """A feature grouprl may not have: passed on when it has the key; accepted when it is off
    (false, or kwargs of a switched-off feature); else an error naming it."""
    if key in known:
        put(key, key, value, True)
    elif value and (off is None or off):
        put(key, key, value, True)  # raises: this grouprl does not have it


VLLM_MODES = {"colocate": "vllm", "server": "vllm_server"}


def _backend(use_vllm: Any, flat: dict[str, Any], origin: str) -> str:
    """use_vllm + vllm_mode -> generation_backend. ``colocate``: the engine in the trainer's process
    (also when vllm_mode is absent: TRL 1.16's default too); ``server``: grouprl's
    ``vllm_server`` backend, whose server is ``grouprl vllm-serve`` (not ``trl vllm-serve``).
    vllm_mode without use_vllm has no effect, as in TRL."""
    mode = flat.get("vllm_mode", "colocate")
    if mode not in VLLM_MODES:
        raise _err(origin, "vllm_mode", mode, f"expected one of {sorted(VLLM_MODES)}")
    return VLLM_MODES[mode] if use_vllm else "hf"


def _single(value: Any, origin: str) -> Any:
    if isinstance(value, list):
        if len(value) != 1:
            raise _err(origin, "dataset_configs", value, "grouprl loads one dataset config (use dataset_mixture)")
        return value[0]
    return value


def _hub_strategy(value: Any, origin: str, put) -> None:
    if value == "every_save":  # each checkpoint to its own revision branch (main is never overwritten)
        put("hub_strategy", "push_to_hub_revision", True)
    elif value != "end":
        raise _err(
            origin,
            "hub_strategy",
            value,
            "grouprl supports 'every_save' (each checkpoint to a revision branch) and 'end' (the final model only)",
        )


def _batch_size(flat: dict[str, Any], out: dict[str, Any], origin: str, put) -> None:
    """TRL's per_device_train_batch_size counts completions per micro-batch (x accumulation steps per
    update); grouprl's batch_size counts prompts (groups) per step, each with num_generations
    completions, split into gradient_accumulation_steps micro-batches. One process:
    batch_size = per_device_train_batch_size * gradient_accumulation_steps / num_generations."""
    per_device = flat["per_device_train_batch_size"]
    accumulation = out.get("gradient_accumulation_steps", 1)
    generations = out.get("num_generations", 8)
    for key, value in (
        ("per_device_train_batch_size", per_device),
        ("gradient_accumulation_steps", accumulation),
        ("num_generations", generations),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _err(
                origin,
                key,
                value,
                "expected a positive integer (per_device_train_batch_size x "
                "gradient_accumulation_steps / num_generations sets batch_size)",
            )
    completions = per_device * accumulation
    if completions % generations:
        raise _err(
            origin,
            "per_device_train_batch_size",
            per_device,
            f"x gradient_accumulation_steps {accumulation} = {completions} completions per step is not a "
            f"multiple of num_generations {generations}",
        )
    put("per_device_train_batch_size", "batch_size", completions // generations, "batch_size" not in out)
    generation = flat.get("generation_batch_size")
    if generation is not None and generation != completions:  # TRL: steps_per_generation = generation / completions
        raise _err(
            origin,
            "generation_batch_size",
            generation,
            f"TRL would reuse one generation for several optimizer steps ({completions} completions a step); grouprl "
            "generates every step's batch (its generation_batch_size only chunks generate): use num_iterations",
        )
