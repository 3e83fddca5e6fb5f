"""The scorer: one object, built once from the config, that scores episodes for training,
evaluation and ``grouprl rewards preview`` alike (one failure rule, one error format).

Episode score (no mixer)::

    B = sum_f w_f * score_f + sum_t (env_reward_t - penalty_t)
    R = B + sum_l w_l * D_l                 (D_l: learned reward l's score)
    R = mixer.mix(B, sum_l w_l * D_l)       (with a mixer)

(with ``invalid_penalty: on_step`` the penalties are left out of B and r_t, and the advantage
phase charges each to its invalid step's advantage instead, as verl-agent does).
Step rewards: ``r_t = env_reward_t - penalty_t``, plus, per reward function f, either
``w_f * base_reward`` on the steps its ``step_outputs`` name (``w_f * default_step_reward`` on
the others) or, when it gives no step outputs, ``w_f * score_f`` on the last step; the learned
part ``R - B`` goes on the last step too, so without step outputs ``sum_t r_t = R``.

Failure rule: a reward is called on the whole batch; if that call raises, it is called sample
by sample, so only the failing samples lose it. A failed sample keeps ``None`` for that reward
and an error ``"<reward>: <ExceptionType>: <message>"``; the batch stops (``RewardFailure``)
only when more than ``max_error_fraction`` of its samples failed.
"""

from __future__ import annotations

import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from grouprl.config import ConfigError
from grouprl.records import Episode, Verdict
from grouprl.rewards.guard import RewardFailure, RewardTimeout, call_with_timeout, finite_score, map_with_timeout
from grouprl.rewards.kit import RewardFunctionError, score_batch
from grouprl.rewards.learned.checked_scores import checked_scores
from grouprl.rewards.learned.protocol import LearnedReward, RewardMixer
from grouprl.rewards.learned.model_rewards import build_reward, split_learned
from grouprl.rewards.resolve import resolve_reward
from grouprl.rewards.step_rewards import align_step_rewards, check_step_outputs, episode_messages
from grouprl.rewards.registry import is_typed, normalized_weights, weighted_score

log = logging.getLogger(__name__)


@dataclass
class RewardPart:
    """One reward function's verdict on one episode."""

    score: float | None = None  # None: no opinion, or failed (then ``error`` says why)
    error: str | None = None
    step_outputs: list | None = None
    reason: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)  # typed rewards' named sub-scores


@dataclass
class Scores:
    """What the score phase returns: one verdict per episode (in the episodes' order), their scores as a
    tensor, every reward's full part per episode (step outputs and sub-metrics too), and metrics."""

    episode: torch.Tensor  # (E,) float64: the episode score R (float64: a huge but finite 1e30 survives its square)
    verdicts: list[Verdict]
    parts: dict[str, list[RewardPart]]  # reward key -> one part per episode
    metrics: dict[str, float]

    @classmethod
    def of(cls, verdicts: list[Verdict], parts: dict[str, list[RewardPart]] | None = None,
           metrics: dict[str, float] | None = None) -> "Scores":
        return cls(torch.tensor([v.score for v in verdicts], dtype=torch.float64), list(verdicts), parts or {},
                   dict(metrics or {}))


def unique_keys(names: list[str]) -> list[str]:
    """Names as keys; a name given twice gets '#2', '#3', ..."""
    seen: dict[str, int] = {}
    keys = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        keys.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return keys


def _error(key: str, err: BaseException) -> str:
    return f"{key}: {type(err).__name__}: {err}"


class RewardTypeError(ConfigError):
    """A reward returned something that is not a number: its author's bug, reported as bad input."""


def _typed_part(key: str, episode: Episode, result) -> RewardPart:
    error = result.error and f"{key}: {result.error}"
    if error is None and result.is_score_valid:
        error = finite_score(key, result.score)[1]  # NaN / inf: an error of this sample, never a score
    if result.step_outputs and error is None:
        error = check_step_outputs(key, episode, result.step_outputs)
    valid = result.is_score_valid and error is None
    metrics = {k: {"score": m.score, "is_score_valid": m.is_score_valid, "reason": m.reason}
               for k, m in result.metrics.items()}
    return RewardPart(float(result.score) if valid else None, error, result.step_outputs if valid else None,
                      result.reason, metrics)


# A per-sample budget for a whole batch also pays for one sandbox start-up and the file's imports.
BATCH_STARTUP_S = 15.0


def _typed_parts(key: str, fn, episodes: list[Episode], timeout: float) -> list[RewardPart]:
    """A pointwise reward: one call per sample, each with its own budget (an endless program costs its
    own sample). A batch reward: one call for the batch, under one budget, or under ``timeout`` per
    sample when it bounds each sample itself (``budget="per_sample"``: sandboxed user rewards)."""
    per_sample = getattr(fn, "budget", "per_call") == "per_sample"

    def columns_of(batch: list[Episode]) -> dict[str, list]:
        rows = [{k: v for k, v in ep.row.items() if k != "ground_truth"} for ep in batch]
        columns = {k: [r.get(k) for r in rows] for k in {k for r in rows for k in r}}
        columns["group_ids"] = [ep.group_id for ep in batch]  # group-level rewards (length) need the groups
        if per_sample:
            columns["sample_timeout"] = timeout or None
        return columns

    def call(batch: list[Episode]):
        budget = timeout * len(batch) + BATCH_STARTUP_S if per_sample and timeout else timeout
        return call_with_timeout(score_batch, budget, fn, [episode_messages(ep) for ep in batch],
                                 [ep.row.get("ground_truth") for ep in batch], name=key, **columns_of(batch))

    if fn.reward_mode == "pointwise":
        calls = [((fn, [episode_messages(ep)], [ep.row.get("ground_truth")]), columns_of([ep])) for ep in episodes]
        out = []
        for ep, (value, err) in zip(episodes, map_with_timeout(score_batch, timeout, calls, name=key)):
            try:
                out.append(RewardPart(error=_error(key, err)) if err is not None else _typed_part(key, ep, value[0]))
            except Exception as bad:  # noqa: BLE001 - a malformed result is this sample's error
                out.append(RewardPart(error=_error(key, bad)))
        return out
    try:
        return [_typed_part(key, ep, r) for ep, r in zip(episodes, call(episodes))]
    except (RewardTimeout, RewardFunctionError) as err:  # the call's error: a stuck reward, a wrong count or type
        return [RewardPart(error=_error(key, err)) for _ in episodes]
    except Exception as err:  # noqa: BLE001 - find the failing samples one by one below
        if len(episodes) == 1:
            return [RewardPart(error=_error(key, err))]
    out = []
    for ep in episodes:
        try:
            out.append(_typed_part(key, ep, call([ep])[0]))
        except Exception as err:  # noqa: BLE001 - one failing sample must not fail the others
            out.append(RewardPart(error=_error(key, err)))
    return out


def _plain_parts(key: str, fn, episodes: list[Episode], timeout: float) -> list[RewardPart]:
    """One call per episode, each with the time budget; after a timeout the rest of the batch is
    not tried (a stuck reward costs one budget per batch, not one per sample)."""
    calls = [((ep.steps[-1].action_text if ep.steps else "", ep.row.get("ground_truth")),
              {k: v for k, v in ep.row.items() if k != "ground_truth"}) for ep in episodes]
    out: list[RewardPart] = []
    for ep, (value, err) in zip(episodes, map_with_timeout(fn, timeout, calls, name=key)):
        if err is not None:
            out.append(RewardPart(error=_error(key, err)))
            continue
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise RewardTypeError(f"reward '{key}' returned {type(value).__name__} {value!r:.60} for a sample "
                                  f"(group {ep.group_id}); expected a float or None")
        score, error = finite_score(key, value)
        out.append(RewardPart(score, error))
    return out


class Scorer:
    """Reward functions (weighted), optional learned rewards and an optional mixer."""

    def __init__(self, reward_names: list[str], weights: list[float], correct_reward: str | None = None, *,
                 normalize_weights: bool = True, max_error_fraction: float = 1.0,
                 reward_kwargs: dict[str, dict] | None = None, sandbox_user_rewards: bool = False,
                 default_step_reward: float = 0.0, learned: list[LearnedReward] | None = None,
                 learned_weights: list[float] | None = None, mixer: RewardMixer | None = None,
                 reward_timeout: float = 0.0, penalty_in_rewards: bool = True,
                 predict: Callable[[str], Any] | None = None, run_dir: str | None = None):
        if len(weights) != len(reward_names):
            raise ValueError(f"{len(weights)} weight(s) for {len(reward_names)} reward(s)")
        # Model rewards (reward models, judges; run_dir holds a judge's cache) are built here; a learned
        # reward named in ``rewards`` joins the learned ones with its (normalised) weight.
        built = {key: build_reward(name, (reward_kwargs or {}).get(name), sandbox_user_rewards, run_dir,
                                   reward_timeout) for key, name in zip(unique_keys(list(reward_names)), reward_names)}
        all_weights = dict(zip(built, normalized_weights(weights, normalize_weights)))
        self.fns, named_learned, named_mixer = split_learned(built)
        self.keys = list(self.fns)
        self.weights = {key: all_weights[key] for key in self.keys}
        self.judge_key = correct_reward if correct_reward in self.keys else None
        # The judge is one of the rewards (its score is read), or resolved under the same sandbox rule:
        # with sandbox_user_rewards a user file named here is never imported into this process.
        self.judge = (self.fns[correct_reward] if self.judge_key is not None
                      else resolve_reward(correct_reward, sandbox_user_rewards) if correct_reward else None)
        self.predict = predict  # the task's answer parser (``task.predict``): what a completion answered
        self.max_error_fraction, self.default_step_reward = max_error_fraction, default_step_reward
        self.learned = list(learned or []) + list(named_learned.values())
        self.learned_weights = list(learned_weights or [1.0] * len(learned or [])) + [all_weights[k] for k in named_learned]
        self.mixer = mixer if mixer is not None else named_mixer  # one a learned reward brought
        self._evaluating = False  # inside eval_mode(): learned rewards score, never update or gather
        self._io_pool: ThreadPoolExecutor | None = None  # the judges' thread, made on first use
        self.reward_timeout = reward_timeout  # seconds per reward call (0: none)
        self.penalty_in_rewards = penalty_in_rewards  # False: invalid_penalty on_step (charged in the advantage)

    @classmethod
    def from_config(cls, cfg, task, learned: list[LearnedReward] | None = None,
                    learned_weights: list[float] | None = None, mixer: RewardMixer | None = None) -> "Scorer":
        """The run's scorer: the task's rewards with the config's weights, budget and sandbox rule, and the
        learned rewards / mixer the task offers (``task.scorer_extras(cfg)``, e.g. GRAIL's) unless given."""
        task_config = cfg.task
        if learned is None and mixer is None:
            extras = task.scorer_extras(cfg)
            learned, learned_weights, mixer = extras.get("learned"), extras.get("learned_weights"), extras.get("mixer")
        return cls(task.reward_names, task.reward_weights, task.correct_reward,
                   normalize_weights=task_config.normalize_weights,
                   max_error_fraction=task_config.max_reward_error_fraction, reward_kwargs=task.reward_kwargs,
                   sandbox_user_rewards=task_config.sandbox_user_rewards,
                   default_step_reward=task_config.default_step_reward, learned=learned,
                   learned_weights=learned_weights, mixer=mixer, reward_timeout=task_config.reward_timeout,
                   penalty_in_rewards=cfg.rollout.invalid_penalty == "in_returns",
                   predict=getattr(task, "predict", None), run_dir=cfg.train.output_dir)

    # --- scoring ---------------------------------------------------------------------------
    def reward_parts(self, episodes: list[Episode]) -> dict[str, list[RewardPart]]:
        t = self.reward_timeout

        def parts(key: str, fn) -> list[RewardPart]:
            return _typed_parts(key, fn, episodes, t) if is_typed(fn) else _plain_parts(key, fn, episodes, t)

        # Rewards that wait on a server (judges) run in their own thread while the others compute here.
        waiting = [key for key, fn in self.fns.items() if getattr(fn, "waits_on_network", False)]
        if not waiting or len(self.fns) == 1:
            return {key: parts(key, fn) for key, fn in self.fns.items()}
        # One pool kept for the run: its threads (and the reward worker each keeps, guard.py) serve every batch.
        self._io_pool = self._io_pool or ThreadPoolExecutor(len(waiting), "reward-io")
        pending = {key: self._io_pool.submit(parts, key, self.fns[key]) for key in waiting}
        done = {key: parts(key, fn) for key, fn in self.fns.items() if key not in pending}
        done.update({key: future.result() for key, future in pending.items()})
        return {key: done[key] for key in self.keys}

    def score(self, episodes: list[Episode]) -> Scores:
        """Score a batch: one :class:`Verdict` per episode (score, step rewards, each reward's part,
        errors, reasons, prediction, correct); the episodes are only read. Learned rewards then update once."""
        parts = self.reward_parts(episodes)
        verdicts = [self._verdict(i, ep, parts) for i, ep in enumerate(episodes)]
        learned = self._learned_scores(episodes, verdicts) if self.learned else None  # their errors count too
        failed = sum(bool(v.errors) for v in verdicts)
        fraction = failed / max(len(episodes), 1)
        if failed:
            log.warning("reward errors on %d of %d samples, e.g. %s", failed, len(episodes),
                        next(e for v in verdicts for e in v.errors))
        if fraction > self.max_error_fraction:
            raise RewardFailure(f"{failed} of {len(episodes)} samples failed in reward functions "
                                f"(> max_reward_error_fraction={self.max_error_fraction}); first error: "
                                f"{next(e for v in verdicts for e in v.errors)}")
        metrics = {"reward_errors": float(failed), "reward_error_fraction": fraction}
        for key, fn in self.fns.items():  # a judge's calls, cache hits, latency, tokens since the last batch
            if hasattr(fn, "drain_metrics"):
                metrics.update({f"{key}/{name}": value for name, value in fn.drain_metrics().items()})
        if learned is not None:
            metrics.update(self._add_learned(episodes, verdicts, *learned))
        return Scores.of(verdicts, parts, metrics)

    def _verdict(self, i: int, ep: Episode, parts: dict[str, list[RewardPart]]) -> Verdict:
        mine = {key: parts[key][i] for key in self.keys}
        env_rewards = [step.env_reward - self._penalty(step) for step in ep.steps]
        verdict = Verdict(parts={key: part.score for key, part in mine.items()},
                          errors=[part.error for part in mine.values() if part.error],
                          reasons={key: part.reason for key, part in mine.items() if part.reason},
                          step_rewards=list(env_rewards))
        for key, part in mine.items():
            if part.step_outputs:
                align_step_rewards(verdict.step_rewards, part.step_outputs, self.weights[key], self.default_step_reward)
            elif part.score is not None and ep.steps:
                verdict.step_rewards[-1] += self.weights[key] * part.score
        verdict.score = weighted_score(verdict.parts, self.weights) + sum(env_rewards)
        answer = ep.steps[-1].action_text if ep.steps else ""
        if self.judge is None:
            verdict.correct = ep.success
        elif self.judge_key is not None:  # the judge is one of the rewards (typed or TRL too): its 1.0
            verdict.correct = verdict.parts[self.judge_key] == 1.0
        else:
            verdict.correct = (not is_typed(self.judge)) and self.judge(answer, ep.row.get("ground_truth")) == 1.0
        verdict.prediction = self.predict(answer) if self.predict is not None else None
        return verdict

    @property
    def part_keys(self) -> list[str]:
        """Every key a verdict's ``parts`` may hold: the reward functions', then the learned rewards'."""
        return self.keys + [r.name for r in self.learned]

    def _penalty(self, step) -> float:
        return step.penalty if self.penalty_in_rewards else 0.0

    def _learned_scores(self, episodes: list[Episode], verdicts: list[Verdict]) -> tuple[torch.Tensor, torch.Tensor]:
        """sum_l w_l * D_l per episode, and which episodes every learned reward scored without error. A
        failed (NaN, raised, timed out) or absent D_l counts 0; its error joins the verdict's
        (``rewards/learned/checked_scores.py``)."""
        learned = torch.zeros(len(episodes), dtype=torch.float32)
        valid = torch.ones(len(episodes), dtype=torch.bool)
        for reward, weight in zip(self.learned, self.learned_weights):
            scores, errors = checked_scores(reward, episodes, self.reward_timeout)
            for i, (verdict, score, error) in enumerate(zip(verdicts, scores, errors)):
                verdict.parts[reward.name] = score
                if error is not None:
                    verdict.errors.append(error)
                    valid[i] = False
                if score is not None:
                    learned[i] += weight * score
        return learned, valid

    def _add_learned(self, episodes: list[Episode], verdicts: list[Verdict], learned: torch.Tensor,
                     valid: torch.Tensor) -> dict[str, float]:
        """Mix the learned scores into the verdicts' scores, then update each learned reward once."""
        base = torch.tensor([v.score for v in verdicts], dtype=torch.float32)
        final = self.mixer.mix(base, learned) if self.mixer is not None else base + learned
        for verdict, b, r in zip(verdicts, base.tolist(), final.tolist()):
            verdict.score = r
            if verdict.step_rewards:
                verdict.step_rewards[-1] += r - b
        metrics: dict[str, float] = {}
        if self._evaluating:  # scored only; evaluation may run on one process, so no gathers either
            return metrics
        # A frozen learner (GAIL_EVAL_MODE=1, GAIL_TRAIN=0) skips its step inside update() but still
        # reports its metrics, so a frozen run logs alpha, beta and the discriminator every step too.
        for reward in self.learned:
            metrics.update(reward.update(episodes))
        if self.mixer is not None:
            # This process's B and D: the mixer gathers every process's itself (as the discriminator gathers
            # its examples), so it stays identical everywhere.
            metrics.update(self.mixer.update(base[valid], learned[valid]))  # a failed D_l does not steer it
        return metrics

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
        return {"learned": {r.name: r.state_dict() for r in self.learned},
                "mixer": self.mixer.state_dict() if self.mixer is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for reward in self.learned:
            if reward.name not in state.get("learned", {}):
                raise KeyError(f"checkpoint has no state for learned reward '{reward.name}'")
            reward.load_state_dict(state["learned"][reward.name])
        if self.mixer is not None and state.get("mixer") is not None:
            self.mixer.load_state_dict(state["mixer"])
