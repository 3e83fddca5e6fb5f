"""open-r1 / TRL recipe keys onto grouprl's config: a recipe written for open-r1 runs unchanged.

open-r1 recipes are flat YAML in TRL's ``GRPOConfig`` names plus open-r1's script arguments. Each
key here is either the same as grouprl's (``learning_rate``, ``seed``, ``beta``...), renamed
(``max_completion_length`` -> ``max_new_tokens``), converted (``per_device_train_batch_size``:
completions per process and micro-batch, into grouprl's ``batch_size``: prompts per step over every
process), or accepted because it asks for what grouprl does anyway (``logging_strategy: steps``).
Every other key is an error that names it: TRL 0.18's parser silently dropped unknown keys, so a
dozen settings of the GRAIL project's recipes never took effect. The keys a handler converts are in
``openr1_keys.py``, by family.

A recipe in TRL's keys means what TRL means where the two differ in what a setting does: rewards named
by ``reward_funcs`` are weighted by TRL's raw weights (``normalize_weights: false`` unless the recipe sets
it; ``openr1_keys.py``), and ``entropy_target`` acts only with ``use_adaptive_entropy: true`` (``trl_keys.py``).
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

from grouprl.config.openr1_keys import (
    Handlers,
    RecipeKeyError,
    data_keys,
    generation_keys,
    key_error,
    objective_keys,
    run_keys,
)
from grouprl.config.trl_keys import TRL_ONLY, check_trl_only, trl_keyed, trl_objective

__all__ = ["RENAMED", "REWARD_OPTIONS", "SAME_BEHAVIOUR", "RecipeKeyError", "launch_processes", "translate_recipe"]

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


class _Translation:
    """grouprl's keys as they are found: explicit ones (``out``) and derived ones (``derived``: a key given
    explicitly wins over one derived from another key)."""

    def __init__(self, known: set[str], origin: str) -> None:
        self.known, self.origin = known, origin
        self.out: dict[str, Any] = {}
        self.derived: dict[str, tuple[str, Any]] = {}  # grouprl key -> (from which key, value)

    def put(self, source: str, key: str, value: Any, explicit: bool = False) -> None:
        if key not in self.known:
            raise key_error(self.origin, source, value, f"maps to grouprl's '{key}', which this grouprl does not have")
        if explicit:
            self.out[key] = value
        else:
            self.derived[key] = (source, value)


def launch_processes(environ: Mapping[str, str] | None = None) -> int:
    """The number of training processes the launcher started: ``WORLD_SIZE`` (torchrun and accelerate set
    it in every process), 1 without it (``os.environ`` unless ``environ`` is given)."""
    value = (os.environ if environ is None else environ).get("WORLD_SIZE", "")
    if value == "":
        return 1
    try:
        processes = int(value)
    except ValueError:
        processes = 0
    if processes < 1:
        raise RecipeKeyError(f"environment variable WORLD_SIZE: got {value!r}; expected a positive integer")
    return processes


def translate_recipe(
    flat: dict[str, Any], known_keys: Iterable[str], origin: str = "recipe", environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """grouprl's flat keys for a flat recipe in grouprl's and/or open-r1's names.

    ``known_keys``: grouprl's config field names. A key that is neither one of them nor an
    open-r1 key below raises :class:`RecipeKeyError` naming it; so does an open-r1 key whose
    grouprl counterpart this build does not have (e.g. ``use_vllm`` without a vLLM backend).
    ``environ`` (default ``os.environ``): its ``WORLD_SIZE`` is the number of training processes, which
    TRL's per-device batch keys count in (:func:`launch_processes`).
    """
    known = set(known_keys)
    t = _Translation(known, origin)
    options: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        if key in REWARD_OPTIONS:
            reward, option = REWARD_OPTIONS[key]
            options.setdefault(reward, {})[option] = value
    handlers = {
        **data_keys(flat, options, origin, t.put),
        **run_keys(flat, known, origin, t.put),
        **generation_keys(flat, origin, t.put),
        **objective_keys(flat, t.put),
    }
    for key, value in flat.items():
        if key not in REWARD_OPTIONS:
            _translate_key(key, value, handlers, t)
    if options:
        reward = next(iter(options))
        raise key_error(
            origin,
            next(k for k, (r, _) in REWARD_OPTIONS.items() if r == reward and k in flat),
            options[reward],
            f"configures reward '{reward}', which reward_funcs does not name: it would never take effect",
        )
    out = t.out
    if "per_device_train_batch_size" in flat:
        _batch_size(flat, out, origin, t.put, launch_processes(environ))
    is_trl = trl_keyed(flat, known, set(handlers) | set(RENAMED) | set(SAME_BEHAVIOUR) | set(REWARD_OPTIONS))
    trl_objective(
        flat, out, lambda s, k, v: t.put(s, k, v, True), lambda k, v, why: key_error(origin, k, v, why), is_trl
    )
    for key, (_, value) in t.derived.items():
        out.setdefault(key, value)
    named_data = {"dataset_name", "dataset_name_or_path", "dataset_mixture"} & set(flat)
    if named_data and "task" not in flat and "task" in known:
        out["task"] = "prompt_dataset"  # open-r1 recipes name a dataset, never a task
    return out


def _translate_key(key: str, value: Any, handlers: Handlers, t: _Translation) -> None:
    """One recipe key: its handler, a rename, a key that asks for what grouprl does anyway, grouprl's own
    key, a TRL-only key with the one value grouprl accepts; anything else is an error naming it."""
    if key in handlers:
        handlers[key](value)
    elif key in RENAMED:
        t.put(key, RENAMED[key], value, True)
    elif key in SAME_BEHAVIOUR:
        if value not in SAME_BEHAVIOUR[key]:
            raise key_error(
                t.origin,
                key,
                value,
                f"grouprl supports only {sorted(SAME_BEHAVIOUR[key], key=str)} (what it does anyway)",
            )
    elif key in t.known:
        t.out[key] = value
    elif key in TRL_ONLY:
        check_trl_only(key, value, lambda k, v, why: key_error(t.origin, k, v, why))
    else:
        raise key_error(
            t.origin,
            key,
            value,
            "not a grouprl key and not an open-r1/TRL key grouprl supports (see docs/data.md, 'Recipes')",
        )


def _batch_size(flat: dict[str, Any], out: dict[str, Any], origin: str, put, processes: int) -> None:
    """TRL's per_device_train_batch_size counts completions per process and micro-batch; one optimizer step
    takes gradient_accumulation_steps micro-batches on every process (TRL's generation_batch_size, by
    default). grouprl's batch_size counts prompts (groups) per step over all processes, each with
    num_generations completions:
    batch_size = per_device_train_batch_size * processes * gradient_accumulation_steps / num_generations."""
    per_device = flat["per_device_train_batch_size"]
    accumulation = out.get("gradient_accumulation_steps", 1)
    generations = out.get("num_generations", 8)
    for key, value in (
        ("per_device_train_batch_size", per_device),
        ("gradient_accumulation_steps", accumulation),
        ("num_generations", generations),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise key_error(
                origin,
                key,
                value,
                "expected a positive integer (per_device_train_batch_size x processes x "
                "gradient_accumulation_steps / num_generations sets batch_size)",
            )
    completions = per_device * processes * accumulation  # TRL's default generation_batch_size
    if completions % generations:
        raise key_error(
            origin,
            "per_device_train_batch_size",
            per_device,
            f"x {processes} process(es) (WORLD_SIZE) x gradient_accumulation_steps {accumulation} = {completions} "
            f"completions per step is not a multiple of num_generations {generations}",
        )
    put("per_device_train_batch_size", "batch_size", completions // generations, "batch_size" not in out)
    steps = flat.get("steps_per_generation")
    if steps is not None and steps != accumulation:  # TRL's default is gradient_accumulation_steps: the same work
        raise key_error(
            origin,
            "steps_per_generation",
            steps,
            f"TRL spreads one generation over {steps} optimizer steps' micro-batches where an optimizer step takes "
            f"gradient_accumulation_steps {accumulation}; grouprl generates every step's batch (to reuse one "
            "generation for several optimizer steps use num_iterations)",
        )
    generation = flat.get("generation_batch_size")
    if generation is not None and generation != completions:  # TRL: steps_per_generation != accumulation
        raise key_error(
            origin,
            "generation_batch_size",
            generation,
            f"TRL splits one generation into {generation} / ({per_device} x {processes} process(es)) micro-batches, "
            f"where an optimizer step takes gradient_accumulation_steps {accumulation} ({completions} completions a "
            "step); grouprl generates each step's batch at once (its generation_batch_size only chunks generate): "
            "for several optimizer steps on one generation use num_iterations",
        )
