"""Rewards that a model gives, named in ``rewards:`` like any other reward and built with their options:

* ``path/to/model`` or ``owner/name``: a sequence-classifier reward model (``reward_model.py``);
* ``judge``: an LLM judge over an OpenAI-compatible endpoint, one call per completion (``judge.py``);
* ``group_judge``: one call scores the K completions of a group together (RULER-style);
* ``distilled_judge``: a small reward model trained online on a judge's labels (``distill.py``);
* ``path/to/file.py:make_reward`` where ``make_reward`` is decorated ``@learned_reward``: a factory
  called with the options, whose ``LearnedReward`` joins the scorer's learned rewards (trained online,
  mixed with the fixed rewards by the scorer's rule or mixer).

Anything else is a reward function, resolved as before (``resolve.py``).
"""

from __future__ import annotations

from typing import Any

from grouprl.config import ConfigError
from grouprl.rewards.learned.protocol import LearnedReward, RewardMixer
from grouprl.rewards.resolve import bind_options, resolve_reward

JUDGES = ("judge", "group_judge")
# What a recipe can name besides the reward functions' registry (``grouprl rewards list`` shows both):
# the name as written in ``rewards:``, its kind, and what it is.
MODEL_REWARDS: dict[str, tuple[str, str]] = {
    "judge": ("model (LLM judge)", "an LLM judge over an OpenAI-compatible endpoint, one call per completion"),
    "group_judge": ("model (LLM judge)", "one judge call scores the K completions of a group together"),
    "distilled_judge": ("learned", "a small reward model trained online on a judge's labels"),
    "path/to/model | owner/name": ("model (reward model)", "a sequence-classifier reward model, its score"),
    "path/to/file.py:make_reward": ("learned", "a @learned_reward factory: scored, updated each batch, checkpointed"),
}


def build_reward(
    name: str,
    options: dict[str, Any] | None = None,
    sandbox_user_rewards: bool = False,
    run_dir: str | None = None,
    reward_timeout: float = 0.0,
):
    """The function the scorer calls for reward ``name`` with its recipe ``options`` bound; a model
    reward is built (and loaded) here, with ``run_dir`` holding a judge's response cache and ``reward_timeout``
    setting a judge's batch deadline."""
    options = dict(options or {})
    if name == "distilled_judge":
        from grouprl.rewards.learned.distill import build_distilled_judge

        return build_distilled_judge(options, run_dir, reward_timeout)
    if name in JUDGES:
        from grouprl.rewards.learned.judge import build_judge

        return build_judge(name, options, run_dir, reward_timeout)
    from grouprl.rewards.learned.reward_model import looks_like_model

    if looks_like_model(name):
        from grouprl.rewards.learned.reward_model import reward_model_reward

        return reward_model_reward(name, **options)
    fn = resolve_reward(name, sandbox_user_rewards)
    if getattr(fn, "makes_learned_reward", False):
        made = fn(**options)
        reward, mixer = made if isinstance(made, tuple) and len(made) == 2 else (made, None)
        if not isinstance(reward, LearnedReward) or (mixer is not None and not isinstance(mixer, RewardMixer)):
            raise ConfigError(
                f"reward '{name}': the @learned_reward factory returned {type(made).__name__}; "
                "expected a LearnedReward (name, frozen, score, update, state_dict, load_state_dict) "
                "or a (LearnedReward, RewardMixer) pair"
            )
        return LearnedWithMixer(reward, mixer) if mixer is not None else reward
    return bind_options(fn, options or None)


def learned_reward(factory):
    """Mark ``factory(**options) -> LearnedReward`` (or ``(LearnedReward, RewardMixer)``) so that naming it in
    ``rewards:`` builds a learned reward (and the mixer that combines it with the fixed rewards)."""
    factory.makes_learned_reward = True
    return factory


class LearnedWithMixer(tuple):
    """A learned reward and the mixer it brings (at most one mixer per run)."""

    def __new__(cls, reward: LearnedReward, mixer: RewardMixer):
        return super().__new__(cls, (reward, mixer))


def split_learned(built: dict[str, Any]) -> tuple[dict[str, Any], dict[str, LearnedReward], RewardMixer | None]:
    """(reward functions, learned rewards, the mixer one of them brought) of the built rewards, keyed as in
    the recipe."""
    mixers = [obj[1] for obj in built.values() if isinstance(obj, LearnedWithMixer)]
    if len(mixers) > 1:
        raise ConfigError(f"rewards: {len(mixers)} learned rewards bring a mixer; a run mixes with at most one")
    built = {key: obj[0] if isinstance(obj, LearnedWithMixer) else obj for key, obj in built.items()}
    learned = {key: obj for key, obj in built.items() if isinstance(obj, LearnedReward)}
    return {key: obj for key, obj in built.items() if key not in learned}, learned, (mixers[0] if mixers else None)
