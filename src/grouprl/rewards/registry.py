"""Reward functions by name. A reward is ``fn(completion, ground_truth, **row) -> float | None``;
``None`` means "no opinion" on that sample (ignored in the weighted sum, as TRL does)."""

from __future__ import annotations

from typing import Callable

from grouprl.rewards.arithmetic import arithmetic_digits, arithmetic_exact
from grouprl.rewards.gsm8k import gsm8k_final

RewardFn = Callable[..., "float | None"]

REWARDS: dict[str, RewardFn] = {
    "gsm8k_final": gsm8k_final,
    "arithmetic_exact": arithmetic_exact,
    "arithmetic_digits": arithmetic_digits,
}


def get_reward(name: str) -> RewardFn:
    if name not in REWARDS:
        raise KeyError(f"unknown reward '{name}'; known: {sorted(REWARDS)}")
    return REWARDS[name]


def weighted_score(parts: dict[str, float | None], weights: dict[str, float]) -> float:
    """score = sum_i w_i * r_i over the functions that gave an opinion (TRL's nansum rule)."""
    return float(sum(weights[k] * v for k, v in parts.items() if v is not None))
