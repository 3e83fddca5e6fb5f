"""open-r1 / TRL recipe keys by family (the data, the run, vLLM generation, the objective): each family's
handlers, ``key -> handler(value)``, and the conversions of their values (``openr1.py`` runs the translation).

A handler passes grouprl's key on with ``put(source, key, value, explicit)``: an explicit key is set as it is,
a derived one (``bf16`` -> ``torch_dtype``) only where the recipe does not set that key itself.
"""

from __future__ import annotations

from typing import Any, Callable

from grouprl.config.base import ConfigError
from grouprl.config.trl_keys import TRL_OBJECTIVE_KEYS

Handlers = dict[str, Callable[[Any], Any]]


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


class RecipeKeyError(ConfigError):
    """A recipe key grouprl does not support, or a value it cannot translate."""


def key_error(origin: str, key: str, value: Any, why: str) -> RecipeKeyError:
    return RecipeKeyError(f"{origin}: key '{key}' (value {value!r}): {why}")


def data_keys(flat: dict[str, Any], options: dict[str, dict[str, Any]], origin: str, put) -> Handlers:
    """The rewards, the dataset and its held-out evaluation."""

    def reward_funcs(value: Any) -> None:
        put("reward_funcs", "rewards", _rewards(value, options, origin), True)
        # TRL scores sum_i w_i * r_i with the weights as given (reward_weights, else all 1.0), never w_i / sum(w):
        # the same after scale_rewards group/batch, sum(w) times larger advantages under scale_rewards none
        put("reward_funcs", "normalize_weights", False)  # derived: the recipe's own normalize_weights wins

    return {
        "reward_funcs": reward_funcs,
        # null: the dataset's default config (TRL's meaning), as when the key is absent
        "dataset_config": lambda v: None if v is None else put("dataset_config", "dataset_config", v, True),
        "dataset_configs": lambda v: put("dataset_configs", "dataset_config", _single(v, origin), True),
        "do_eval": lambda v: None if v else put("do_eval", "eval_strategy", "no"),
    }


def run_keys(flat: dict[str, Any], known: set[str], origin: str, put) -> Handlers:
    """The schedule, precision, memory, reporting and the hub."""
    return {
        "report_to": lambda v: put("report_to", "report_to", _report_to(v, origin), True),
        # TRL's max_steps: -1 means "num_train_epochs decides" (kept, and rejected, without epochs)
        "max_steps": lambda v: (
            None if v == -1 and "num_train_epochs" in flat else put("max_steps", "max_steps", v, True)
        ),
        "bf16": lambda v: put("bf16", "torch_dtype", "bfloat16") if v else None,
        "fp16": lambda v: put("fp16", "torch_dtype", "float16") if v else None,
        "hub_strategy": lambda v: _hub_strategy(v, origin, put),
        "per_device_train_batch_size": lambda v: None,  # resolved after every key (openr1.py): it needs num_generations
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


def generation_keys(flat: dict[str, Any], origin: str, put) -> Handlers:
    """vLLM: whether it generates, colocated or as a server, and its context length."""
    return {
        "use_vllm": lambda v: put("use_vllm", "generation_backend", _backend(v, flat, origin), True),
        "vllm_mode": lambda v: _backend(flat.get("use_vllm", False), flat, origin),  # checked; use_vllm applies it
        "vllm_max_model_length": lambda v: (
            None if v is None else put("vllm_max_model_length", "vllm_max_model_len", v, True)
        ),
        # TRL's default (gradient_accumulation_steps: one generation per optimizer step) is grouprl's way; any
        # other value is refused where the batch is read (openr1._batch_size), which knows the accumulation
        "steps_per_generation": lambda v: _one_generation_a_step(v, flat, origin),
    }


def _one_generation_a_step(value: Any, flat: dict[str, Any], origin: str) -> None:
    if "per_device_train_batch_size" not in flat and value not in (None, 1, flat.get("gradient_accumulation_steps", 1)):
        raise key_error(
            origin,
            "steps_per_generation",
            value,
            "grouprl generates every step's batch (one generation per optimizer step, TRL's default of "
            "gradient_accumulation_steps); to reuse one generation for several optimizer steps use num_iterations",
        )


def objective_keys(flat: dict[str, Any], put) -> Handlers:
    """The clip widths and the reward scaling; TRL's loss keys are read together by ``trl_objective``."""

    def epsilon(value: Any) -> None:  # TRL's one clip width: both of grouprl's bounds (epsilon_high derived)
        put("epsilon", "epsilon_low", value, True)
        put("epsilon", "epsilon_high", value)

    handlers: Handlers = {
        "scale_rewards": lambda v: put("scale_rewards", "scale_rewards", _scale_rewards(v), True),
        "epsilon": epsilon,
        "epsilon_high": lambda v: (
            None if v is None else put("epsilon_high", "epsilon_high", v, True)
        ),  # null: epsilon's
    }
    for key in TRL_OBJECTIVE_KEYS:
        handlers[key] = lambda v: None  # read together by trl_objective: a loss, its options, its correction
    if flat.get("loss_type") == "cispo":  # TRL's epsilon / epsilon_high are CISPO's cap (trl_keys.py)
        handlers["epsilon"] = handlers["epsilon_high"] = lambda v: None
    return handlers


def _report_to(value: Any, origin: str) -> str:
    sinks = [value] if isinstance(value, str) else list(value or [])
    sinks = [s for s in sinks if s not in ("none", None)]
    if not sinks:
        return "none"
    if len(sinks) == 1:
        return sinks[0]  # grouprl validates the name (none, wandb, ...)
    raise key_error(origin, "report_to", value, "grouprl reports to one sink besides metrics.jsonl")


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
            raise key_error(
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
        raise key_error(origin, "vllm_mode", mode, f"expected one of {sorted(VLLM_MODES)}")
    return VLLM_MODES[mode] if use_vllm else "hf"


def _single(value: Any, origin: str) -> Any:
    if isinstance(value, list):
        if len(value) != 1:
            raise key_error(origin, "dataset_configs", value, "grouprl loads one dataset config (use dataset_mixture)")
        return value[0]
    return value


def _hub_strategy(value: Any, origin: str, put) -> None:
    if value == "every_save":  # each checkpoint to its own revision branch (main is never overwritten)
        put("hub_strategy", "push_to_hub_revision", True)
    elif value != "end":
        raise key_error(
            origin,
            "hub_strategy",
            value,
            "grouprl supports 'every_save' (each checkpoint to a revision branch) and 'end' (the final model only)",
        )
