"""The learner's input: every step of every episode as one training sample (``pack_samples`` in
``learner.py`` for window episodes, ``conversation_samples.py`` for conversations)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grouprl.policy.scoring import TokenBatch


@dataclass
class StepSamples:
    """Every step of every episode as one training sample."""

    batch: TokenBatch
    advantages: torch.Tensor  # (N,)
    sampler_logps: torch.Tensor | None = None  # (N, T) the generation engine's log-probs, when it reports them
