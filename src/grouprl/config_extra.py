"""Config sections for prompt formatting, the training schedule, evaluation during training,
hub revisions, model loading and W&B placement (the bring-your-own-data work, ``docs/data.md``).

Registered like a task's section (``config.register_section``), so every field is a flag, an
environment variable (``GROUPRL_<FIELD>``) and a recipe key, nested under its section or flat.
Imported by ``tasks/prompt_dataset.py``, which ``tasks/__init__.py`` imports: every config
build sees them.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from grouprl.config import Section, register_section


class PromptsConfig(Section):
    chat_template: str | None = Field(
        None, description="Jinja chat template (or a file holding one) replacing the tokenizer's; saved with checkpoints")
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments for apply_chat_template, e.g. {enable_thinking: false}")
    max_prompt_length: int | None = Field(
        None, gt=0, description="keep the last N prompt tokens (left truncation; counted and warned; empty = all)")


class ScheduleConfig(Section):
    num_train_epochs: float | None = Field(
        None, gt=0, description="passes over the training rows; sets max_steps when max_steps is not given")
    warmup_ratio: float = Field(0.0, ge=0, lt=1, description="linear warmup over this share of the optimizer "
                                                               "steps (instead of warmup_steps)")
    save_strategy: Literal["steps", "epoch", "no"] = Field(
        "steps", description="checkpoint every save_steps, once per epoch, or only at the end")
    save_total_limit: int | None = Field(
        None, gt=0, description="keep the newest N checkpoints (never deleting the best or the last; empty = all)")


class EvaluationConfig(Section):
    eval_strategy: Literal["no", "steps"] = Field("no", description="evaluate every eval_steps during training")
    eval_steps: int = Field(50, gt=0, description="evaluate every N steps (eval_strategy: steps)")
    max_eval_samples: int | None = Field(
        None, gt=0, description="a seeded subset of N held-out prompts per evaluation (empty = all)")
    num_generations_eval: int = Field(1, ge=1, description="completions per eval prompt (pass@k with k = this)")
    metric_for_best_model: str = Field("accuracy", description="eval metric that picks the best checkpoint")
    greater_is_better: bool = Field(True, description="whether a larger metric_for_best_model is better")


class HubConfig(Section):
    hub_model_id: str | None = Field(None, description="hub repo (org/name) the model is pushed to")
    hub_model_revision: str = Field("main", description="branch prefix of checkpoint pushes: <revision>-step-<N>")
    push_to_hub: bool = Field(False, description="push the final model to the main revision of hub_model_id")
    push_to_hub_revision: bool = Field(False, description="push every checkpoint to its own branch, in the background")
    overwrite_hub_revision: bool = Field(False, description="allow pushing to a revision that already exists")
    hub_private_repo: bool = Field(True, description="create hub_model_id private when it is missing")


class LoadingConfig(Section):
    model_revision: str = Field("main", description="hub revision (branch, tag or commit) of model_name_or_path")
    attn_implementation: str | None = Field(
        None, description="attention kernel for from_pretrained (eager, sdpa, flash_attention_2; empty = default)")


class TrackingConfig(Section):
    wandb_entity: str | None = Field(None, description="W&B entity (team) of the run (WANDB_ENTITY wins)")
    wandb_run_group: str | None = Field(None, description="W&B group of the run (WANDB_RUN_GROUP wins)")


for _name, _section in [("prompts", PromptsConfig), ("schedule", ScheduleConfig), ("evaluation", EvaluationConfig),
                        ("hub", HubConfig), ("loading", LoadingConfig), ("tracking", TrackingConfig)]:
    register_section(_name, _section)


def resolve_schedule(cfg, n_train_rows: int) -> dict[str, int]:
    """Epochs, warmup ratio and the save strategy as steps, written into ``cfg.train``.

    ``num_train_epochs`` sets ``max_steps = ceil(epochs * rows / batch_size)`` unless ``max_steps``
    was given; ``warmup_ratio`` sets ``warmup_steps = ceil(ratio * optimizer steps)``;
    ``save_strategy: epoch`` saves every ``ceil(rows / batch_size)`` steps, ``no`` only at the end.
    """
    t, s = cfg.train, cfg.schedule
    steps_per_epoch = max(1, math.ceil(n_train_rows / cfg.rollout.batch_size))
    if s.num_train_epochs and "max_steps" not in t.model_fields_set:
        t.max_steps = max(1, math.ceil(s.num_train_epochs * steps_per_epoch))
    if s.warmup_ratio:
        t.warmup_steps = math.ceil(s.warmup_ratio * t.max_steps * cfg.algorithm.num_iterations)
    if s.save_strategy == "epoch":
        t.save_steps = steps_per_epoch
    elif s.save_strategy == "no":
        t.save_steps = 0
    return {"max_steps": t.max_steps, "warmup_steps": t.warmup_steps, "save_steps": t.save_steps}
