"""The entropy bonus, usable with any loss: a static coefficient, or one adapted toward a target entropy.

    L = L_policy - c * H,     H = sum_t H_t m_t / sum_t m_t   (the batch's mean token entropy)

H_t = -sum_v pi_v log pi_v at each completion position, with its gradient. The mean is over the
whole batch's tokens (every micro-batch and process), so the bonus does not depend on the loss's
aggregation or on how the batch is split (TRL takes each micro-batch's own mean; the same on one
micro-batch). Adaptive (He et al., 2025, "Skywork Open Reasoner 1 Technical Report"; TRL PR #6140):
after each optimizer step, c moves by ``delta`` up when the step's entropy H <= target, down
otherwise, within [coef_min, coef_max], and c is applied only while the last H <= target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class EntropyBonus:
    coef: float = 0.0
    target: float | None = None  # None: static coefficient
    delta: float = 0.005
    coef_min: float = 0.0
    coef_max: float = 1.0
    last_entropy: float = math.inf  # the batch entropy at the previous optimizer step (adaptive)

    @property
    def enabled(self) -> bool:
        return self.coef != 0.0 or self.target is not None

    def applied_coef(self) -> float:
        """The coefficient this optimizer step's micro-batches use (fixed within the step)."""
        if self.target is None:
            return self.coef
        return self.coef if self.last_entropy <= self.target else 0.0

    def update(self, batch_entropy: float) -> None:
        """After an optimizer step: move an adaptive coefficient toward the target (static: nothing)."""
        if self.target is None:
            return
        step = self.delta if batch_entropy <= self.target else -self.delta
        self.coef = min(max(self.coef + step, self.coef_min), self.coef_max)
        self.last_entropy = batch_entropy

    def state_dict(self) -> dict[str, float | None]:
        """JSON-ready (no entropy seen yet: None)."""
        return {"coef": self.coef, "last_entropy": None if math.isinf(self.last_entropy) else self.last_entropy}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        last = state["last_entropy"]
        self.coef, self.last_entropy = float(state["coef"]), math.inf if last is None else float(last)


def entropy_bonus(
    entropy: torch.Tensor, mask: torch.Tensor, coef: float, total_tokens: float | None = None
) -> torch.Tensor:
    """The term added to a micro-batch's loss: -c * sum_t H_t m_t / N, N the whole batch's masked tokens
    (``total_tokens``; defaults to this micro-batch's)."""
    mask = mask.to(entropy.dtype)
    n = mask.sum() if total_tokens is None else torch.as_tensor(float(total_tokens))
    return -coef * (entropy * mask).sum() / n.clamp(min=1.0)
