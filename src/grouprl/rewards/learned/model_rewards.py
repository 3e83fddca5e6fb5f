"""Rewards that a model gives, named in ``rewards:`` like any other reward and built with their options:

* ``path/to/model`` or ``owner/name``: a sequence-classifier reward model (``reward_model.py``);
* ``judge``: an LLM judge over an OpenAI-compatible endpoint, one call per completion (``judge.py``);
* ``group_judge``: one call scores the K completions of a group together (RULER-style);
* ``path/to/file.py:make_reward`` where ``make_reward`` is decorated ``@learned_reward``: a factory
  called with the options, whose ``LearnedReward`` joins the scorer's learned rewards (trained online,
  mixed with the fixed rewards by the scorer's rule or mixer).

Anything else is a reward function, resolved as before (``resolve.py``).
"""

from __future__ import annotations

from typing import Any

from grouprl.config import ConfigError
from grouprl.rewards.learned.protocol import LearnedReward
from grouprl.rewards.resolve import bind_options, resolve_reward

JUDGES = ("judge", "group_judge")


def build_reward(name: str, options: dict[str, Any] | None = None, sandbox_user_rewards: bool = False,
                 run_dir: str | None = None):
    """The function the scorer calls for reward ``name`` with its recipe ``options`` bound; a model
    reward is built (and loaded) here, with ``run_dir`` holding a judge's response cache."""
    options = dict(options or {})
    if name in JUDGES:
        from grouprl.rewards.learned.judge import build_judge

        return build_judge(name, options, run_dir)
    from grouprl.rewards.learned.reward_model import looks_like_model

    if looks_like_model(name):
        from grouprl.rewards.learned.reward_model import reward_model_reward

        return reward_model_reward(name, **options)
    fn = resolve_reward(name, sandbox_user_rewards)
    if getattr(fn, "makes_learned_reward", False):
        reward = fn(**options)
        if not isinstance(reward, LearnedReward):
            raise ConfigError(f"reward '{name}': the @learned_reward factory returned {type(reward).__name__}; "
                              "expected an object with name, frozen, score, update, state_dict, load_state_dict")
        return reward
    return bind_options(fn, options or None)


def learned_reward(factory):
    """Mark ``factory(**options) -> LearnedReward`` so that naming it in ``rewards:`` builds a learned reward."""
    factory.makes_learned_reward = True
    return factory


def split_learned(built: dict[str, Any]) -> tuple[dict[str, Any], dict[str, LearnedReward]]:
    """(reward functions, learned rewards) of the built rewards, each keyed as in the recipe."""
    learned = {key: obj for key, obj in built.items() if isinstance(obj, LearnedReward)}
    return {key: obj for key, obj in built.items() if key not in learned}, learned
