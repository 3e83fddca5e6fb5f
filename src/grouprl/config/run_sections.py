"""The sections of the run around the loop: training schedule and checkpoints, evaluation,
logging and trackers, the runtime, prompt formatting and hub pushes."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from grouprl.config.base import Section


class TrainConfig(Section):
    output_dir: str = Field("outputs/grouprl", description="where everything of the run is written")
    max_steps: int = Field(400, gt=0, description="training steps (one rollout batch each)")
    learning_rate: float = Field(3e-4, gt=0, description="AdamW learning rate")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    adam_beta2: float = Field(0.999, gt=0, lt=1, description="AdamW beta2")
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = Field(
        "linear", description="decay to 0 over the run, after warmup"
    )
    warmup_steps: int = Field(0, ge=0, description="linear warmup optimizer steps")
    gradient_accumulation_steps: int = Field(1, gt=0, description="micro-batches per optimizer step")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping")
    seed: int = Field(0, description="seeds data order, sampling and init")
    save_steps: int = Field(0, ge=0, description="checkpoint every N steps (0 = only at the end)")
    resume_from_checkpoint: str | None = Field(None, description="checkpoint dir to continue from, or 'last'")
    overwrite_output_dir: bool = Field(False, description="start afresh in a non-empty output_dir (else refused)")
    max_nonfinite_updates: int = Field(3, ge=0, description="stop after N updates skipped for a non-finite loss/grad")
    warm_start: Literal["auto", "sft", "none"] = Field(
        "auto",
        description="auto: SFT-warm the tiny model grouprl builds, start a named model as it is; sft: SFT-warm a "
        "named model too (tool tasks: on the task's expert conversations, docs/agent_main_job.md); none: no SFT",
    )
    sft_steps: int = Field(1500, ge=0, description="tiny default: most SFT warm-up steps")
    sft_check_every: int | None = Field(
        None, gt=0, description="SFT steps between early-stop checks (empty: 10, tool conversations 50)"
    )
    sft_first_check: int | None = Field(
        None,
        gt=0,
        description="tool conversations: the SFT step of the first early-stop check, then every sft_check_every "
        "(empty: sft_check_every); steps before it only train",
    )
    sft_target_accuracy: float | None = Field(
        0.2,
        gt=0,
        le=1,
        description="tiny default: stop SFT early once greedy accuracy on held-back training rows "
        "reaches this (checked every 10 steps; empty = run all sft_steps); "
        "environments with expert demonstrations: sampled success rate",
    )
    sft_target_max: float | None = Field(
        None,
        gt=0,
        le=1,
        description="tool conversations: where the first check at or above sft_target_accuracy is above this, "
        "move back along the last stretch of SFT until sampled success is inside the band (job/sft_band.py)",
    )
    sft_max_calls_ratio: float | None = Field(
        None,
        gt=0,
        description="tool conversations: a check whose sampled conversations call tools more than this many times "
        "as often as the expert's counts as under the band (a model calling in a loop is no start; empty = off)",
    )
    sft_learning_rate: float = Field(3e-3, gt=0, description="tiny default: SFT learning rate")
    sft_batch_size: int = Field(64, gt=0, description="tiny default: SFT batch size")
    sft_demonstrations: Literal["random", "expert"] = Field(
        "random", description="environments: SFT on random admissible moves (format only) or BFS-optimal moves"
    )
    sft_demo_episodes: int = Field(300, gt=0, description="environments: episodes played to make SFT demonstrations")
    # from the former ``schedule`` section
    num_train_epochs: float | None = Field(
        None, gt=0, description="passes over the training rows; sets max_steps when max_steps is not given"
    )
    warmup_ratio: float = Field(
        0.0, ge=0, lt=1, description="linear warmup over this share of the optimizer steps (instead of warmup_steps)"
    )
    save_strategy: Literal["steps", "epoch", "no"] = Field(
        "steps", description="checkpoint every save_steps, once per epoch, or only at the end"
    )
    save_total_limit: int | None = Field(
        None, gt=0, description="keep the newest N checkpoints (never deleting the best or the last; empty = all)"
    )

    former_sections = ("schedule",)


class EvalConfig(Section):
    n_eval: int = Field(200, ge=0, description="held-out examples evaluated before and after training (0 = skip)")
    eval_greedy: bool = Field(True, description="greedy decoding (else sample at the rollout temperature)")
    eval_batch_size: int = Field(200, gt=0, description="sequences per eval generate call")
    eval_max_new_tokens: int | None = Field(None, gt=0, description="eval completion cap (empty = max_new_tokens)")
    # from the former ``evaluation`` section
    eval_strategy: Literal["no", "steps"] = Field("no", description="evaluate every eval_steps during training")
    eval_steps: int = Field(50, gt=0, description="evaluate every N steps (eval_strategy: steps)")
    max_eval_samples: int | None = Field(
        None, gt=0, description="a seeded subset of N held-out prompts per evaluation (empty = all)"
    )
    num_generations_eval: int = Field(1, ge=1, description="completions per eval prompt (pass@k with k = this)")
    metric_for_best_model: str = Field("accuracy", description="eval metric that picks the best checkpoint")
    greater_is_better: bool = Field(True, description="whether a larger metric_for_best_model is better")

    former_sections = ("evaluation",)


class LoggingConfig(Section):
    report_to: Literal["none", "wandb", "trackio", "tensorboard"] = Field("none", description="also log to a tracker")
    wandb_project: str = Field("grouprl", description="W&B / trackio project (WANDB_PROJECT, TRACKIO_PROJECT win)")
    run_name: str | None = Field(None, description="default grpo_{model}_K{K}_steps{N} (WANDB_NAME wins)")
    logging_steps: int = Field(10, gt=0, description="print metrics every N steps (all go to metrics.jsonl)")
    log_rollouts: bool = Field(True, description="write every rollout to rollouts/rollouts.jsonl")
    save_trajectories_every: int = Field(
        10, ge=0, description="write every step of the batch to trajectories/step_N.jsonl every N steps (0 = never)"
    )
    num_completions_to_print: int = Field(
        0,
        ge=0,
        description="print this many of the step's completions (prompt, completion, reward) on step 1 and "
        "every completions_print_steps steps (0 = none)",
    )
    completions_print_steps: int = Field(10, gt=0, description="steps between printed completions")
    # from the former ``tracking`` section
    wandb_entity: str | None = Field(None, description="W&B entity (team) of the run (WANDB_ENTITY wins)")
    wandb_run_group: str | None = Field(None, description="W&B group of the run (WANDB_RUN_GROUP wins)")

    former_sections = ("tracking",)


class RuntimeConfig(Section):
    device: Literal["auto", "cpu", "cuda", "mps"] = Field("auto", description="auto = cuda, else mps, else cpu")
    num_threads: int | None = Field(None, gt=0, description="torch CPU threads (empty = torch default)")
    tune_malloc: bool = Field(
        True,
        description="glibc: keep freed tensor memory for reuse (mmap threshold 32 MiB, trim threshold 2 GiB) "
        "instead of returning it to the kernel after every op (job/malloc_tuning.py); false: glibc's defaults",
    )
    gradient_checkpointing: bool = Field(False, description="recompute activations in the backward: less memory")
    reshard_on_resume: bool = Field(False, description="allow resuming with another process count (new RNG streams)")


class PromptsConfig(Section):
    chat_template: str | None = Field(
        None,
        description="Jinja chat template (or a file holding one) replacing the tokenizer's; saved with checkpoints",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments for apply_chat_template, e.g. {enable_thinking: false}"
    )
    max_prompt_length: int | None = Field(
        None, gt=0, description="keep the last N prompt tokens (left truncation; counted and warned; empty = all)"
    )


class HubConfig(Section):
    hub_model_id: str | None = Field(None, description="hub repo (org/name) the model is pushed to")
    hub_model_revision: str = Field("main", description="branch prefix of checkpoint pushes: <revision>-step-<N>")
    push_to_hub: bool = Field(False, description="push the final model to the main revision of hub_model_id")
    push_to_hub_revision: bool = Field(False, description="push every checkpoint to its own branch, in the background")
    overwrite_hub_revision: bool = Field(False, description="allow pushing to a revision that already exists")
    hub_private_repo: bool = Field(True, description="create hub_model_id private when it is missing")


def resolve_schedule(cfg: Any, n_train_rows: int) -> dict[str, int]:
    """Epochs, warmup ratio and the save strategy as steps, written into ``cfg.train``.

    ``num_train_epochs`` sets ``max_steps = ceil(epochs * rows / batch_size)`` unless ``max_steps``
    was given; ``warmup_ratio`` sets ``warmup_steps = ceil(ratio * optimizer steps)``;
    ``save_strategy: epoch`` saves every ``ceil(rows / batch_size)`` steps, ``no`` only at the end.
    """
    t = cfg.train
    steps_per_epoch = max(1, math.ceil(n_train_rows / cfg.rollout.batch_size))
    if t.num_train_epochs and "max_steps" not in t.model_fields_set:
        t.max_steps = max(1, math.ceil(t.num_train_epochs * steps_per_epoch))
    if t.warmup_ratio:
        t.warmup_steps = math.ceil(t.warmup_ratio * t.max_steps * cfg.algorithm.num_iterations)
    if t.save_strategy == "epoch":
        t.save_steps = steps_per_epoch
    elif t.save_strategy == "no":
        t.save_steps = 0
    return {"max_steps": t.max_steps, "warmup_steps": t.warmup_steps, "save_steps": t.save_steps}
