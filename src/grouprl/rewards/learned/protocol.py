"""Learned rewards and reward mixers: the seam for rewards that train alongside the policy.

A *learned reward* (the GRAIL discriminator today, a reward model later) scores every episode
of a batch and then updates itself once on that batch. A *mixer* combines the base score B
(reward functions + environment rewards) with the learned score D into the episode score;
with no mixer the scorer adds ``weight * D`` to B. Both are frozen during evaluation
(``Scorer.eval_mode()``) and their state is saved in every checkpoint and restored on resume.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from grouprl.records import Episode


@runtime_checkable
class LearnedReward(Protocol):
    name: str
    frozen: bool  # eval mode: scored but never updated

    def score(self, episodes: list["Episode"]) -> list[float]:
        """One score per episode, computed without gradients."""

    def update(self, episodes: list["Episode"]) -> dict[str, float]:
        """One update on the batch just scored; returns metrics. A no-op when frozen."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@runtime_checkable
class RewardMixer(Protocol):
    frozen: bool

    def mix(self, base: "torch.Tensor", learned: "torch.Tensor") -> "torch.Tensor":
        """Episode scores (E,) from the base scores (E,) and the learned scores (E,)."""

    def update(self, base: "torch.Tensor", learned: "torch.Tensor") -> dict[str, float]:
        """Adapt the mixing on the batch just scored; returns metrics. A no-op when frozen."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...
