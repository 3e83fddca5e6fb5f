"""GRAIL's learnable mixer of the base reward B and the discriminator reward D.

  R_i = alpha * B_i + beta * D_i,   (alpha, beta) = softmax(l_B, l_D)
with the logits initialised to the log of the normalised weights (base 1 vs GAIL_WEIGHT 0.5:
alpha = 2/3, beta = 1/3), and after every batch one Adam step (lr GRAIL_WEIGHT_LR) on
  J = -mean_i R_i,   dJ/dl_B = -alpha * beta * (mean B - mean D) = -dJ/dl_D.
So the weight drifts toward whichever source has the larger batch mean: it is not a learned
trade-off between imitation and accuracy but a pull toward the bigger number (with alpha=1,
D = P(expert) sits near 0.5 early, above a weak policy's accuracy, so beta grows first; once
the policy's accuracy passes D's mean, alpha grows back). The mixed score goes through the
group normalisation of GRPO, where only the relative weight matters.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from grouprl.rewards.learned.gather import gather_across_processes


class LearnableMixer:
    """A ``RewardMixer`` (see rewards/learned/protocol.py): mix, update, state_dict, load_state_dict."""

    def __init__(self, base_weight: float = 1.0, learned_weight: float = 0.5, learning_rate: float = 0.05):
        if base_weight <= 0 or learned_weight <= 0:
            raise ValueError(f"mixer weights must be positive, got base {base_weight} and GAIL_WEIGHT {learned_weight}")
        total = base_weight + learned_weight
        self.logits = torch.nn.Parameter(
            torch.tensor([math.log(base_weight / total), math.log(learned_weight / total)])
        )
        self.optimizer = torch.optim.Adam([self.logits], lr=learning_rate)
        self.frozen = False

    def weights(self) -> tuple[float, float]:
        alpha, beta = torch.softmax(self.logits.detach(), 0).tolist()
        return alpha, beta

    def mix(self, base: torch.Tensor, learned: torch.Tensor) -> torch.Tensor:
        alpha, beta = self.weights()
        return alpha * base.float() + beta * learned.float()

    def update(self, base: torch.Tensor, learned: torch.Tensor) -> dict[str, float]:
        """One Adam step on -mean(R) over every process's B and D (none when frozen); returns alpha and beta.

        Each process passes its own part of the batch; the step is taken on the whole batch, the same
        on every process, so the mixer stays identical everywhere."""
        base = torch.tensor(gather_across_processes(base.tolist()), dtype=base.dtype)
        learned = torch.tensor(gather_across_processes(learned.tolist()), dtype=learned.dtype)
        if not self.frozen and base.numel():
            w = torch.softmax(self.logits, 0)
            loss = -(w[0] * base.float() + w[1] * learned.float()).mean()
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        alpha, beta = self.weights()
        return {"grail/alpha": alpha, "grail/beta": beta}

    def state_dict(self) -> dict[str, Any]:
        return {"logits": self.logits.detach().clone(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.logits.copy_(state["logits"])
        self.optimizer.load_state_dict(state["optimizer"])
