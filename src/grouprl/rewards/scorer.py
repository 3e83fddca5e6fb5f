"""The scorer: one object, built once from the config, that scores episodes for training, evaluation and
``grouprl rewards preview`` alike (one failure rule, one error format).

The score phase runs straight through three rooms, each entered once per batch:

    rewards/reward_calls.py   every reward function on every episode, under its time budget -> RewardParts
    rewards/verdicts.py       step-output checks, step rewards, the episode score, correctness, the error
                              budget, then the learned rewards and the mixer -> one Verdict per episode
    rewards/scorer.py         (here) the judges' counters and the ``Scores`` record

The equations of the episode score and the step rewards are in ``rewards/verdicts.py``.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from grouprl.records import Episode, Verdict
from grouprl.rewards.learned.model_rewards import build_reward, split_learned
from grouprl.rewards.learned.protocol import LearnedReward, RewardMixer
from grouprl.rewards.registry import normalized_weights
from grouprl.rewards.resolve import resolve_reward
from grouprl.rewards.reward_calls import RewardPart, RewardTypeError, call_rewards, unique_keys  # noqa: F401
from grouprl.rewards.verdicts import VerdictRules, assemble_verdicts


@dataclass
class Scores:
    """What the score phase returns: one verdict per episode (in the episodes' order), their scores as a
    tensor, every reward's full part per episode (step outputs and sub-metrics too), and metrics."""

    episode: torch.Tensor  # (E,) float64: the episode score R (float64: a huge but finite 1e30 survives its square)
    verdicts: list[Verdict]
    parts: dict[str, list[RewardPart]]  # reward key -> one part per episode
    metrics: dict[str, float]

    @classmethod
    def of(
        cls,
        verdicts: list[Verdict],
        parts: dict[str, list[RewardPart]] | None = None,
        metrics: dict[str, float] | None = None,
    ) -> "Scores":
        return cls(
            torch.tensor([v.score for v in verdicts], dtype=torch.float64),
            list(verdicts),
            parts or {},
            dict(metrics or {}),
        )


def _correctness_judge(fns: dict[str, Any], judge_key: str | None, correct_reward: str | None, sandbox: bool):
    """What decides ``correct``: one of the rewards (its score is read), or ``correct_reward`` resolved under
    the same sandbox rule (with ``sandbox``, a user file named here is never imported into this process)."""
    if judge_key is not None:
        return fns[judge_key]
    return resolve_reward(correct_reward, sandbox) if correct_reward else None


class Scorer:
    """Reward functions (weighted), optional learned rewards and an optional mixer."""

    def __init__(
        self,
        reward_names: list[str],
        weights: list[float],
        correct_reward: str | None = None,
        *,
        normalize_weights: bool = True,
        max_error_fraction: float = 1.0,
        reward_kwargs: dict[str, dict] | None = None,
        sandbox_user_rewards: bool = False,
        default_step_reward: float = 0.0,
        learned: list[LearnedReward] | None = None,
        learned_weights: list[float] | None = None,
        mixer: RewardMixer | None = None,
        reward_timeout: float = 0.0,
        penalty_in_rewards: bool = True,
        predict: Callable[[str], Any] | None = None,
        run_dir: str | None = None,
    ):
        if len(weights) != len(reward_names):
            raise ValueError(f"{len(weights)} weight(s) for {len(reward_names)} reward(s)")
        # Model rewards (reward models, judges; run_dir holds a judge's cache) are built here; a learned
        # reward named in ``rewards`` joins the learned ones with its (normalised) weight.
        built = {
            key: build_reward(name, (reward_kwargs or {}).get(name), sandbox_user_rewards, run_dir, reward_timeout)
            for key, name in zip(unique_keys(list(reward_names)), reward_names)
        }
        all_weights = dict(zip(built, normalized_weights(weights, normalize_weights)))
        self.fns, named_learned, named_mixer = split_learned(built)
        self.keys = list(self.fns)
        self.weights = {key: all_weights[key] for key in self.keys}
        self.judge_key = correct_reward if correct_reward in self.keys else None
        self.judge = _correctness_judge(self.fns, self.judge_key, correct_reward, sandbox_user_rewards)
        self.predict = predict  # the task's answer parser (``task.predict``): what a completion answered
        self.max_error_fraction, self.default_step_reward = max_error_fraction, default_step_reward
        self.learned = list(learned or []) + list(named_learned.values())
        self.learned_weights = list(learned_weights or [1.0] * len(learned or [])) + [
            all_weights[k] for k in named_learned
        ]
        self.mixer = mixer if mixer is not None else named_mixer  # one a learned reward brought
        self._evaluating = False  # inside eval_mode(): learned rewards score, never update or gather
        self._io_pool: ThreadPoolExecutor | None = None  # the judges' thread, made on first use
        self.reward_timeout = reward_timeout  # seconds per reward call (0: none)
        self.penalty_in_rewards = penalty_in_rewards  # False: invalid_penalty on_step (charged in the advantage)
        self.rules = VerdictRules(
            self.weights,
            default_step_reward,
            penalty_in_rewards,
            self.judge,
            self.judge_key,
            predict,
            max_error_fraction,
            reward_timeout,
        )

    @classmethod
    def from_config(
        cls,
        cfg,
        task,
        learned: list[LearnedReward] | None = None,
        learned_weights: list[float] | None = None,
        mixer: RewardMixer | None = None,
    ) -> "Scorer":
        """The run's scorer: the task's rewards with the config's weights, budget and sandbox rule, and the
        learned rewards / mixer the task offers (``task.scorer_extras(cfg)``, e.g. GRAIL's) unless given."""
        task_config = cfg.task
        if learned is None and mixer is None:
            extras = task.scorer_extras(cfg)
            learned, learned_weights, mixer = extras.get("learned"), extras.get("learned_weights"), extras.get("mixer")
        return cls(
            task.reward_names,
            task.reward_weights,
            task.correct_reward,
            normalize_weights=task_config.normalize_weights,
            max_error_fraction=task_config.max_reward_error_fraction,
            reward_kwargs=task.reward_kwargs,
            sandbox_user_rewards=task_config.sandbox_user_rewards,
            default_step_reward=task_config.default_step_reward,
            learned=learned,
            learned_weights=learned_weights,
            mixer=mixer,
            reward_timeout=task_config.reward_timeout,
            penalty_in_rewards=cfg.rollout.invalid_penalty == "in_returns",
            predict=task.predict,
            run_dir=cfg.train.output_dir,
        )

    # --- scoring ---------------------------------------------------------------------------
    def score(self, episodes: list[Episode]) -> Scores:
        """Score a batch: one :class:`Verdict` per episode (score, step rewards, each reward's part, errors,
        reasons, prediction, correct); the episodes are only read. Learned rewards then update once."""
        waiting = sum(bool(getattr(fn, "waits_on_network", False)) for fn in self.fns.values())
        if waiting and len(self.fns) > 1 and self._io_pool is None:  # one pool for the run: its threads serve
            self._io_pool = ThreadPoolExecutor(waiting, "reward-io")  # every batch (and keep their workers)
        parts = call_rewards(self.fns, episodes, self.reward_timeout, self._io_pool)
        verdicts, parts, metrics = assemble_verdicts(
            episodes, parts, self.rules, self.learned, self.learned_weights, self.mixer, self._evaluating
        )
        for key, fn in self.fns.items():  # a judge's calls, cache hits, latency, tokens since the last batch
            if hasattr(fn, "drain_metrics"):
                metrics.update({f"{key}/{name}": value for name, value in fn.drain_metrics().items()})
        return Scores.of(verdicts, parts, metrics)

    @property
    def part_keys(self) -> list[str]:
        """Every key a verdict's ``parts`` may hold: the reward functions', then the learned rewards'."""
        return self.keys + [r.name for r in self.learned]

    # --- modes and state -------------------------------------------------------------------
    @contextlib.contextmanager
    def eval_mode(self) -> Iterator["Scorer"]:
        """Learned rewards and the mixer frozen (scored, never updated) inside the block."""
        learners = self.learned + ([self.mixer] if self.mixer is not None else [])
        before = [x.frozen for x in learners]
        for x in learners:
            x.frozen = True
        self._evaluating = True
        try:
            yield self
        finally:
            self._evaluating = False
            for x, was in zip(learners, before):
                x.frozen = was

    def state_dict(self) -> dict[str, Any]:
        return {
            "learned": {r.name: r.state_dict() for r in self.learned},
            "mixer": self.mixer.state_dict() if self.mixer is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for reward in self.learned:
            if reward.name not in state.get("learned", {}):
                raise KeyError(f"checkpoint has no state for learned reward '{reward.name}'")
            reward.load_state_dict(state["learned"][reward.name])
        if self.mixer is not None and state.get("mixer") is not None:
            self.mixer.load_state_dict(state["mixer"])
