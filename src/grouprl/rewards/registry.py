"""Reward functions by name: built-ins, ``path/to/file.py:function`` or ``package.module:function``.

Three kinds are accepted: plain ``fn(completion, ground_truth, **row) -> float | None`` (the
built-ins), typed ``@reward_function`` functions, which see the whole conversation, and TRL's
``fn(completions, **columns) -> list[float | None]`` (wrapped by ``rewards/trl_signature.py``). ``None``
(or ``is_score_valid=False``) means "no opinion" on that sample and is left out of the sum.
"""

from __future__ import annotations

from typing import Callable

from grouprl.rewards.builtin.number_answer import arithmetic_digits, arithmetic_exact, arithmetic_last_number
from grouprl.rewards.builtin.structured import BUILTIN_STRUCTURED
from grouprl.rewards.builtin.text import BUILTIN_TEXT
from grouprl.rewards.builtin.gsm8k import gsm8k_final
from grouprl.rewards.builtin.slate_accuracy import slate_accuracy, slate_click, slate_opinion
from grouprl.rewards.trl_signature import as_typed_reward, takes_trl_signature
from grouprl.registry import Registry
from grouprl.user_code import short_name

RewardFn = Callable[..., "float | None"]


def declare_reward(name: str, fn: RewardFn) -> RewardFn:
    """TRL / open-r1's signature (completions, **columns) -> list runs as a typed batch reward."""
    return as_typed_reward(fn, short_name(name)) if takes_trl_signature(fn) else fn


# Not checked by run_config: 'rewards:' also names reward models and judges (rewards/learned/model_rewards.py);
# every name is resolved where the scorer is built, before any model loads.
REWARDS: Registry[RewardFn] = Registry("reward", declare_reward)
REWARDS.update(
    gsm8k_final=gsm8k_final,
    arithmetic_exact=arithmetic_exact,
    arithmetic_digits=arithmetic_digits,
    arithmetic_last_number=arithmetic_last_number,
    slate_accuracy=slate_accuracy,
    slate_click=slate_click,
    slate_opinion=slate_opinion,
)
REWARDS.update(BUILTIN_TEXT)
REWARDS.update(BUILTIN_STRUCTURED)
get_reward = REWARDS.resolve  # a built-in by name, or 'path/to/file.py:function' / 'package.module:function'


def is_typed(fn: RewardFn) -> bool:
    return hasattr(fn, "reward_mode")


def normalized_weights(weights: list[float], normalize: bool) -> list[float]:
    """w_i / sum_j w_j when ``normalize`` (the recipe's weights then read as shares), else as given."""
    total = sum(weights)
    if normalize and weights and total <= 0:
        raise ValueError(f"reward weights {weights} must sum to a positive number to be normalized")
    return [w / total for w in weights] if normalize else list(weights)


def weighted_score(parts: dict[str, float | None], weights: dict[str, float]) -> float:
    """score = sum_i w_i * r_i over the functions that gave an opinion (TRL's nansum rule)."""
    return float(sum(weights[k] * v for k, v in parts.items() if v is not None))
