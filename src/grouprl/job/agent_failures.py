"""An agent that cannot run stops the run, loudly (``agent:`` runs; docs/agents_endpoint.md, "When the agent
cannot run").

- **The preflight** (:func:`preflight_agent`): before the first step (and before the evaluation before RL),
  the agent plays one episode on the first training row through the run's real endpoint and backend. An
  agent failure or a refused request there stops the run before any training (:class:`AgentCannotRun`, exit 1).
- **The first failure of each kind** is printed once with the agent's traceback, by the runner
  (``rollout/agent/failures.py``); the preflight's episode shares the run's agent settings, so a failure it
  printed is not printed again.
- **A step whose episodes all failed** (:class:`AgentTrainer`) has nothing to learn from: the agent, not the
  policy, went wrong. Its advantages are zeroed and its update skipped outright, as the learner skips an
  update whose advantages are all zero (``train/zero_advantage.py``: the schedule advances, the optimizer
  state and the weights do not move) -- but whatever the KL, entropy or loss settings, since those terms
  would move the weights on samples no agent finished. Counted in ``agent/all_failed_steps``; after
  ``max_failed_agent_steps`` such steps in a row the run stops (exit 1) naming the failures of the last; a run
  that ends with every one of its steps all-failed (fewer steps than that limit) exits 1 too: nothing trained.
"""

from __future__ import annotations

import logging
import warnings

import torch

from grouprl.records import Episode
from grouprl.rollout.agent.failures import failure_summary
from grouprl.rollout.agent.runner import AgentSettings, run_agent_episodes
from grouprl.train.advantages import AdvantageRecord
from grouprl.train.learner import StepSamples, UpdateStats
from grouprl.train.trainer import Trainer

log = logging.getLogger(__name__)


class AgentCannotRun(RuntimeError):
    """The agent failed its preflight episode, or every episode of ``max_failed_agent_steps`` steps in a row;
    the run stops with this one-line message (exit 1)."""


def all_failed(episodes: list[Episode]) -> bool:
    """Every episode was played by the agent and failed (an empty batch is not)."""
    return bool(episodes) and all(ep.agent is not None and ep.agent.failure is not None for ep in episodes)


def preflight_agent(trainer: Trainer) -> None:
    """One episode of the agent on the first training row, with the run's endpoint, backend, sampling and
    agent settings, before any training; a refused request, or a failure before any call was served, raises
    :class:`AgentCannotRun` (``preflight_problem``).
    The sampling stream is left as it was (a seeded or resumed run samples what it would have without it).
    Every process plays it; it stops them all when it fails on any one."""
    settings = trainer.settings
    if not isinstance(settings, AgentSettings):
        return
    task = trainer.task
    row = task.train_rows[0]
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        [episode] = run_agent_episodes(
            [task.env_factory(row)],
            [row],
            1,
            trainer.backend,
            trainer.policy.tokenizer,
            trainer.sampling,
            settings,
            seeds=[task.seed_of(row)],
            policy_version=trainer.step,
        )
    problem = preflight_problem(episode)
    if trainer.parallel.total(1.0 if problem else 0.0) > 0:
        trainer.close()  # the environment pool (no producer runs yet)
        raise AgentCannotRun(
            "the agent failed its preflight episode (one episode on the first training row, before any "
            f"training): {problem or 'on another process (its log says why)'}"
        )
    run = episode.agent
    if run is not None and run.failure is not None:  # after served calls: the model's doing, say so and go on
        log.warning(
            "agent preflight: the episode failed after %d served call(s) (%s); training goes on", run.calls, run.failure
        )
    log.debug("agent preflight: %d call(s)", run.calls if run else 0)


def preflight_problem(episode: Episode) -> str:
    """What makes the agent unable to run, in one line ('' when nothing does): a request the endpoint refused
    (a route or parameter it cannot serve), or a failure before any call was served (the agent's own setup, a
    client it could not build). A failure after served calls is the episode's outcome, not the agent's setup: a
    framework raises on a model's mistake (a tool name it invented, its retries spent) as it would in
    production. That one is printed (``failures.report_first_failures``) and training goes on; if every
    episode keeps failing, ``max_failed_agent_steps`` stops the run."""
    run = episode.agent
    if run is None:
        return "no agent played it"
    refused = ", ".join(f"{code} x{n}" for code, n in sorted(run.refused.items()))
    if refused:
        cause = f"; {run.failure}: {run.message}" if run.failure is not None else " (the agent went on)"
        return f"the endpoint refused {refused} of its requests{cause}"
    if run.failure is not None and run.calls == 0:
        return f"{run.failure}: {run.message} (before any call was served)"
    return ""


def skipped_update(learner) -> UpdateStats:
    """The learner's statistics for an update not taken: the schedule advances as the update would have
    (once per optimizer step, as ``train/zero_advantage.py`` does), the optimizer state and weights stay."""
    with warnings.catch_warnings():  # torch's "scheduler.step() before optimizer.step()" is what we mean here
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(learner.cfg.algorithm.num_iterations):
            learner.scheduler.step()
    return {"loss": 0.0, "grad_norm": 0.0, "skipped_updates": float(learner.skipped_updates)}


class AgentTrainer(Trainer):
    """The trainer of an ``agent:`` run: a step whose episodes all failed takes no optimizer step (counted),
    and ``max_failed_agent_steps`` of them in a row stop the run (:class:`AgentCannotRun`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.all_failed_steps = 0  # since this process started (a resumed run counts afresh)
        self.failed_in_a_row = 0
        self.steps_played = 0  # likewise: the steps this process ran
        self._step_failed = False
        self._failures = ""  # the last all-failed step's failures, in one line

    def advantages(self, episodes: list[Episode], scores) -> AdvantageRecord:
        """The whole batch's (every process's) episodes: every process decides the same."""
        record = super().advantages(episodes, scores)
        self._step_failed = all_failed(episodes)
        if self._step_failed:  # nothing the policy did is judged: no advantage, no update
            self._failures = failure_summary([ep.agent for ep in episodes])
            for values in (record.advantage, record.episode_advantage, record.step_advantage):
                values.zero_()
        return record

    def update(self, samples: StepSamples) -> UpdateStats:
        if not self._step_failed:
            return super().update(samples)
        stats = skipped_update(self.learner)
        # the engines still take the (unchanged) weights as the next version, as after any update
        sync_seconds = self.scheduler().after_update(self.policy.model, self.step + 1)
        if self.cfg.rollout.rollout_mode != "sync":
            stats["async/weight_sync_time"] = sync_seconds
        return stats

    def train_step(self):
        record = super().train_step()
        self.steps_played += 1
        if self._step_failed:
            self.all_failed_steps += 1
            self.failed_in_a_row += 1
        else:
            self.failed_in_a_row = 0
        return record

    def metrics(self, record) -> dict[str, float]:
        return {**super().metrics(record), "agent/all_failed_steps": float(self.all_failed_steps)}

    def logged_step(self, sink) -> dict[str, float]:
        """The step, logged and shown to the observers; then, after an all-failed step, a warning, and the
        stop when it is the ``max_failed_agent_steps``-th in a row."""
        metrics = super().logged_step(sink)
        if not self._step_failed:
            return metrics
        limit = self.cfg.tools.max_failed_agent_steps
        log.warning(
            "step %d: every agent episode failed (%s); no optimizer step (%d such step(s) in a row%s)",
            self.step,
            self._failures,
            self.failed_in_a_row,
            f"; the run stops at {limit}" if limit else "",
        )
        if limit and self.failed_in_a_row >= limit:
            raise AgentCannotRun(
                f"every agent episode failed in {self.failed_in_a_row} steps in a row (max_failed_agent_steps: "
                f"{limit}); the last step's failures: {self._failures}"
            )
        if self.step >= self.cfg.train.max_steps and self.all_failed_steps == self.steps_played:
            raise AgentCannotRun(  # a run shorter than the limit must not end "done" having trained nothing
                f"every agent episode of all {self.steps_played} step(s) of the run failed: nothing was trained; "
                f"the last step's failures: {self._failures}"
            )
        return metrics
