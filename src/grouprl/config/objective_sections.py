"""The ``objective`` section: the policy loss and its options, the KL estimator, the entropy bonus (static or
adaptive), and the two ways a batch is chosen (dynamic sampling, the curriculum), each a sub-section.

The loss is a plain string here: it is checked against its registry where the run is assembled
(``train/objective.py``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from grouprl.config.base import Section


class DynamicSampling(Section):
    metric: Literal["judge", "score"] = Field(
        "judge", description="judge: the task's correct_reward verdict (correct or not); score: the episode score"
    )
    max_batches: int = Field(3, ge=1, description="rollout batches generated at most per step (the first included)")


class Curriculum(Section):
    skip_steps: int = Field(20, ge=1, description="steps a prompt solved K/K or 0/K is left out of sampling")
    max_skipped_fraction: float = Field(
        0.9, gt=0, lt=1, description="never skip more than this share of the training prompts at once"
    )


class ObjectiveConfig(Section):
    loss: str = Field(
        "ppo_clip",
        description="policy loss: ppo_clip, two_sided_clip, gspo, gspo_token, cispo, sapo, "
        "or your own as 'path/to/file.py:function' / 'package.module:function'",
    )
    loss_options: dict[str, Any] = Field(
        default_factory=dict,
        description="the loss's keyword options (undeclared = error); epsilon_low and "
        "epsilon_high, when set, reach a loss that declares them",
    )
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k3", description="per-token KL estimate used when beta > 0")
    entropy_coef: float = Field(
        0.0, ge=0, description="entropy bonus: L - c * mean token entropy (0 = off); adaptive: the starting c"
    )
    entropy_target: float | None = Field(
        None,
        ge=0,
        description="adaptive entropy bonus: c moves by entropy_coef_delta toward keeping the "
        "entropy at this value, applied only while below it (empty = static c)",
    )
    entropy_coef_delta: float = Field(0.005, ge=0, description="adaptive entropy bonus: step of c per update")
    entropy_coef_min: float = Field(0.0, ge=0, description="adaptive entropy bonus: lower bound of c")
    entropy_coef_max: float = Field(1.0, ge=0, description="adaptive entropy bonus: upper bound of c")
    dynamic_sampling: DynamicSampling | None = Field(
        None,
        description="drop groups whose metric has zero variance and generate more until the batch is full: "
        "{metric: judge | score, max_batches: N} (empty = off)",
    )
    curriculum: Curriculum | None = Field(
        None,
        description="skip prompts solved K/K or 0/K for a while: {skip_steps: N, max_skipped_fraction: f} "
        "(empty = off)",
    )
