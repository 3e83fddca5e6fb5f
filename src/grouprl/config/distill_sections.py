"""The ``distill`` section: on-policy distillation, a student learning from a teacher's log-probs on its own
samples (docs/distillation.md). Off unless ``distill_coef`` > 0; then ``teacher`` (a model folder or hub id)
or ``teacher_endpoint`` (an OpenAI-compatible server returning prompt log-probs) is required.

The objective is a plain string here: it is checked against ``algos/distill_objectives.py``'s table where the
learner is built (``train/distillation.py``), before any training.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from grouprl.config.base import Section


class DistillConfig(Section):
    teacher: str | None = Field(
        None, description="on-policy distillation: the teacher, a local model folder or hub id (same tokenizer)"
    )
    teacher_endpoint: str | None = Field(
        None,
        description="on-policy distillation: an OpenAI-compatible server's base URL (…/v1) whose completions "
        "API returns prompt log-probs (vLLM: echo + logprobs); instead of teacher",
    )
    teacher_revision: str = Field("main", description="hub revision of teacher")
    distill_coef: float = Field(
        0.0, ge=0, description="weight of the distillation signal next to the task's objective (0 = off)"
    )
    distill_objective: str = Field(
        "reverse_kl_reward",
        description="reverse_kl_reward (per-token reward in the advantage), k3, forward_kl, jsd "
        "(losses; algos/distill_objectives.py)",
    )
    distill_beta: float = Field(0.5, ge=0, le=1, description="jsd: GKD's beta (0 = forward KL, 1 = reverse KL)")
    distill_top_k: int = Field(
        0, ge=0, description="forward_kl: the teacher's top-k tokens only, renormalised (0 = the full vocabulary)"
    )
    teacher_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="the teacher's dtype (auto = the policy's torch_dtype rule)"
    )
    teacher_device: str = Field("auto", description="the teacher's device (auto = the policy's; e.g. cuda:1)")
    teacher_chunk: int = Field(16, gt=0, description="samples per teacher forward (no_grad, a chunk at a time)")
    teacher_timeout: float = Field(60.0, gt=0, description="teacher_endpoint: seconds per request, all in")
    teacher_retries: int = Field(2, ge=0, description="teacher_endpoint: retries of a transient failure")

    @model_validator(mode="after")
    def _one_teacher(self) -> "DistillConfig":
        if self.teacher and self.teacher_endpoint:
            raise ValueError("config keys 'teacher' and 'teacher_endpoint': give one teacher, not both")
        return self
