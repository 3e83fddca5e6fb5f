"""TRL's GRPOConfig keys that decide the objective, and the ones grouprl has no counterpart for.

A recipe key that TRL defines either does what TRL's does, with TRL's defaults derived from the
chosen loss (so ``loss_type: cispo`` alone caps the weight where TRL caps it), or is refused in one
line that says what grouprl does instead. ``docs/data.md`` ('Recipes') is the table of every key;
``tests/config/test_trl_keys.py`` walks TRL's GRPOConfig so that a key a new TRL adds cannot pass
unclassified.
"""

from __future__ import annotations

from typing import Any, Callable

TRL_EPSILON = 0.2  # GRPOConfig.epsilon; epsilon_high defaults to it (also CISPO's cap)
TRL_SAMPLING_CORRECTION = ("sequence_mask", 3.0)  # vllm_importance_sampling_mode / _clip_max defaults

# loss_type names a loss and an aggregation at once (cispo -> dapo's, sapo -> grpo's)
TRL_LOSS_TYPES = {"cispo": ("cispo", "dapo"), "sapo": ("sapo", "grpo")}
NO_LOSS = {"luspo", "vespo"}  # TRL 1.16 loss types grouprl has no loss for
SAMPLING_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
VLLM_IS_KEYS = (
    "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_max",
    "vllm_importance_sampling_clip_min",
    "vllm_importance_sampling_cap",
)
# read together by trl_objective: they name a loss, its options, its estimator and its correction
TRL_OBJECTIVE_KEYS = (
    "loss_type",
    "importance_sampling_level",
    "delta",
    "sapo_temperature_pos",
    "sapo_temperature_neg",
    "use_bias_correction_kl",
    "multi_objective_aggregation",
    "use_adaptive_entropy",
    *VLLM_IS_KEYS,
)

_SAME_REF = "grouprl's reference model stays the initial policy"
_VESPO = "grouprl has no VESPO loss (loss_type vespo is refused)"
# TRL key -> (values accepted because they ask for what grouprl does anyway, what grouprl does instead)
TRL_ONLY: dict[str, tuple[tuple[Any, ...], str]] = {
    "model_init_kwargs": ((None, {}), "grouprl loads the model from torch_dtype, attn_implementation, model_revision"),
    "trust_remote_code": ((False,), "grouprl loads only architectures transformers ships"),
    "router_aux_loss_coef": ((None, 0.0), "grouprl adds no MoE router loss"),
    "disable_dropout": ((False,), "grouprl trains with the model's own dropout settings"),
    "cast_lm_head_to_fp32": ((False,), "grouprl computes log-probs in float32 from the model's own head"),
    "ds3_gather_for_generation": ((True, False), "no effect: grouprl runs DDP/FSDP, not DeepSpeed ZeRO-3"),
    "shuffle_dataset": ((True,), "grouprl samples prompts in a seeded order, reshuffled every epoch"),
    "pad_to_multiple_of": ((None, "auto"), "grouprl pads each batch to its longest sequence"),
    "min_p": ((None, 0.0), "grouprl samples with temperature, top_k and top_p"),
    "generation_kwargs": ((None, {}), "grouprl samples with temperature, top_k and top_p"),
    "repetition_penalty": ((1.0,), "grouprl samples with temperature, top_k and top_p (the reward exists)"),
    "cache_implementation": ((None,), "grouprl's generation keeps its own KV caches"),
    "vllm_model_impl": (("vllm",), "grouprl's vLLM backends use vLLM's own implementation"),
    "vllm_structured_outputs_regex": ((None,), "grouprl's vLLM backends sample without structured outputs"),
    "vllm_server_base_url": ((None,), "set vllm_server_host and vllm_server_port"),
    "vllm_group_port": ((51216,), "grouprl's vllm_server takes weights from a file, not an NCCL group"),
    "vllm_tensor_parallel_size": ((1,), "grouprl's colocated vLLM engine runs on one device"),
    "vespo_k_pos": ((2.0,), _VESPO),
    "vespo_lambda_pos": ((3.0,), _VESPO),
    "vespo_k_neg": ((3.0,), _VESPO),
    "vespo_lambda_neg": ((2.0,), _VESPO),
    "sync_ref_model": ((False,), _SAME_REF),
    "ref_model_mixup_alpha": ((0.6,), _SAME_REF),
    "ref_model_sync_steps": ((512,), _SAME_REF),
    "top_entropy_quantile": ((1.0,), "grouprl trains every completion token"),
    "max_tool_calling_iterations": ((None,), "set grouprl's max_tool_calls (tools section)"),
    "off_policy_mask_threshold": ((None,), "grouprl masks no sequence for its KL to the sampler"),
    "log_multimodal": ((True, False), "no effect: grouprl trains text models"),
    "log_unique_prompts": ((True, False), "no effect: rollouts.jsonl holds every completion"),
    "log_completions_hub_repo": ((None,), "grouprl writes completions to rollouts.jsonl (log_rollouts)"),
    "use_transformers_continuous_batching": ((False,), "set generation_backend (hf, vllm, vllm_server)"),
    "transformers_continuous_batching_config": ((None,), "set generation_backend (hf, vllm, vllm_server)"),
    "use_transformers_paged": ((False,), "set generation_backend (hf, vllm, vllm_server)"),
    # TrainingArguments keys open-r1 recipes carry
    "adam_beta1": ((0.9,), "grouprl's AdamW has beta1 0.9 (adam_beta2 is a key)"),
    "adam_epsilon": ((1e-8,), "grouprl's AdamW has eps 1e-8"),
    "optim": (("adamw_torch", "adamw_torch_fused"), "grouprl's optimizer is AdamW (fused where it can)"),
    "lr_scheduler_kwargs": ((None, {}), "lr_scheduler_type: constant, linear or cosine, without options"),
    "use_liger_kernel": ((False,), "grouprl computes log-probs chunk by chunk without Liger"),
    "torch_compile": ((False,), "grouprl trains eagerly"),
    "do_train": ((True, False), "no effect: `grouprl train` trains"),
    "disable_tqdm": ((None, True, False), "no effect: grouprl prints a line every logging_steps"),
}


def check_trl_only(key: str, value: Any, err: Callable[[str, Any, str], Exception]) -> None:
    accepted, instead = TRL_ONLY[key]
    if not any(_same(value, ok) for ok in accepted):
        shown = ", ".join(repr(v) for v in accepted)
        raise err(key, value, f"grouprl accepts only {shown} here: {instead}")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    return type(a) is type(b) and a == b or isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b


def trl_keyed(flat: dict[str, Any], known: set[str], translated: set[str]) -> bool:
    """Whether the recipe speaks TRL: it has a key TRL/open-r1 defines and grouprl does not."""
    return any(key not in known and (key in translated or key in TRL_ONLY) for key in flat)


def trl_objective(flat: dict[str, Any], out: dict[str, Any], put, err, is_trl: bool) -> None:
    """The loss, its options, the estimator and the sampling correction that TRL's keys ask for.

    ``put(source, key, value)`` sets grouprl's ``key`` (explicitly); ``err(key, value, why)`` is the
    one-line refusal. Keys the recipe sets in grouprl's own names win over what is derived here."""
    loss_type, level = flat.get("loss_type"), flat.get("importance_sampling_level", "token")
    options: dict[str, Any] = {}
    if loss_type in NO_LOSS:
        raise err(
            "loss_type",
            loss_type,
            "grouprl has no such loss (its TRL ones: grpo, bnpo, dapo, dr_grpo, cispo, "
            "sapo; gspo with importance_sampling_level: sequence)",
        )
    if loss_type in TRL_LOSS_TYPES:
        loss, aggregation = TRL_LOSS_TYPES[loss_type]
        put("loss_type", "loss", loss)
        put("loss_type", "loss_type", aggregation)
        if loss == "cispo":  # TRL caps the weight at epsilon_high itself, which defaults to epsilon (0.2)
            cap = flat.get("epsilon_high")
            options["epsilon_max"] = cap if cap is not None else flat.get("epsilon", TRL_EPSILON)
    elif loss_type is not None:
        put("loss_type", "loss_type", loss_type)  # an aggregation (checked with the config)
    if level == "sequence":
        if loss_type in TRL_LOSS_TYPES:
            raise err(
                "importance_sampling_level",
                level,
                f"grouprl's {loss_type} weighs each token by its own "
                "ratio (token level); drop the key, or use loss_type grpo/dapo for GSPO",
            )
        put("importance_sampling_level", "loss", "gspo")
        # TRL clips the sequence ratio at epsilon / epsilon_high (0.2 by default), not at GSPO's 3e-4 / 4e-4
        if "epsilon_low" not in out:
            put("importance_sampling_level", "epsilon_low", TRL_EPSILON)
        if "epsilon_high" not in out and "epsilon" not in flat:
            put("importance_sampling_level", "epsilon_high", TRL_EPSILON)
    elif level != "token":
        raise err("importance_sampling_level", level, "expected 'token' or 'sequence'")
    if flat.get("delta") is not None:
        options["delta"] = flat["delta"]
    for key, option in (("sapo_temperature_pos", "temperature_pos"), ("sapo_temperature_neg", "temperature_neg")):
        if key in flat:
            options[option] = flat[key]
    if options:
        put("loss_options", "loss_options", {**options, **(out.get("loss_options") or {})})
    _bias_corrected_kl(flat, err, is_trl)
    _aggregation(flat, put, err)
    _adaptive_entropy(flat, out, put, is_trl)
    _sampling_correction(flat, out, put, err)


def _bias_corrected_kl(flat: dict[str, Any], err, is_trl: bool) -> None:
    """TRL multiplies the KL term by the importance ratio unless use_bias_correction_kl is false
    (its default is true); grouprl's KL is never weighted. Only matters when beta != 0."""
    value = flat.get("use_bias_correction_kl")
    if value not in (None, True, False):
        raise err("use_bias_correction_kl", value, "expected true or false")
    if not flat.get("beta") or value is False or (value is None and not is_trl):
        return
    shown = value if value is not None else "true (TRL's default)"
    raise err(
        "use_bias_correction_kl",
        shown,
        "TRL weights the KL term by the importance ratio, grouprl does "
        "not: set use_bias_correction_kl: false for grouprl's KL (TRL's with that setting)",
    )


def _aggregation(flat: dict[str, Any], put, err) -> None:
    """normalize_then_sum is grouprl's gdpo estimator; sum_then_normalize is every other estimator's way."""
    value = flat.get("multi_objective_aggregation")
    if value is None:
        return
    chosen = flat.get("advantage")
    if value == "normalize_then_sum":
        if chosen not in (None, "gdpo"):
            raise err("multi_objective_aggregation", value, f"is grouprl's gdpo estimator, not '{chosen}'")
        put("multi_objective_aggregation", "advantage", "gdpo")
    elif value == "sum_then_normalize":
        if chosen == "gdpo":
            raise err("multi_objective_aggregation", value, "contradicts advantage: gdpo (normalize_then_sum)")
    else:
        raise err("multi_objective_aggregation", value, "expected 'sum_then_normalize' or 'normalize_then_sum'")


def _adaptive_entropy(flat: dict[str, Any], out: dict[str, Any], put, is_trl: bool) -> None:
    """TRL's entropy_target acts only with use_adaptive_entropy: true (TRL's default: false); grouprl's own
    entropy_target alone turns adaptation on. So in a recipe in TRL's keys entropy_target is dropped unless
    use_adaptive_entropy is true, which sets it (TRL's default target 0.2 unless given)."""
    adaptive = flat.get("use_adaptive_entropy")
    if adaptive is None and not is_trl:
        return  # grouprl's keys: entropy_target is grouprl's
    if adaptive:
        put("use_adaptive_entropy", "entropy_target", flat.get("entropy_target", 0.2))  # TRL's default target
    else:
        out.pop("entropy_target", None)


def _sampling_correction(flat: dict[str, Any], out: dict[str, Any], put, err) -> None:
    """TRL's vLLM importance sampling (on by default with use_vllm: sequence-level masking above 3.0)
    onto grouprl's sampling_correction / sampling_correction_cap; grouprl's own keys win."""
    if not flat.get("use_vllm") and not any(key in flat for key in VLLM_IS_KEYS):
        return
    if flat.get("vllm_importance_sampling_clip_min") is not None:
        raise err(
            "vllm_importance_sampling_clip_min",
            flat["vllm_importance_sampling_clip_min"],
            "grouprl's sampling correction has no lower bound (only the cap C)",
        )
    mode, cap = TRL_SAMPLING_CORRECTION
    mode = flat.get("vllm_importance_sampling_mode", mode)
    cap = flat.get("vllm_importance_sampling_clip_max", cap)
    if flat.get("vllm_importance_sampling_cap") is not None:  # TRL's deprecated name wins, as in TRL
        cap = flat["vllm_importance_sampling_cap"]
    if not flat.get("vllm_importance_sampling_correction", True):
        mode = "none"
    elif mode not in SAMPLING_MODES:
        raise err("vllm_importance_sampling_mode", mode, f"expected one of {', '.join(SAMPLING_MODES)}")
    elif cap is None:
        raise err("vllm_importance_sampling_clip_max", cap, "grouprl's sampling correction needs a cap C")
    if "sampling_correction" not in out:
        put("use_vllm", "sampling_correction", mode)
    if "sampling_correction_cap" not in out and mode != "none":
        put("use_vllm", "sampling_correction_cap", cap)
