"""The training loop: rollout -> score -> gather -> advantages -> update, one step per rollout batch.

A step is ``batch_size`` groups x ``num_generations`` episodes; with several processes each
generates and scores its share of the groups, the gather phase collects every process's
episodes, advantages are computed on the whole batch and each process updates on its own share
(``train/parallel.py``; one process: the gather is the identity). Each phase is a method that
returns a record; :meth:`Trainer.train_step` calls them in order and times each. Observers
(``job/observer.py``: evaluation, checkpoint rotation, hub uploads) read the records the step
returns. The estimator (grpo, dr_grpo, rloo, gigpo or a user's) comes from the registry, so this
one trainer trains all of them. ``collect`` asks the rollout scheduler for the next batch of finished groups:
made here when asked (sync) or by a producer ahead of the learner (``train/scheduling.py``, docs/async.md).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from grouprl.algos.advantages import get_estimator
from grouprl.config import Config
from grouprl.observe.sinks import Sink
from grouprl.models.loading import Policy
from grouprl.records import Episode
from grouprl.rewards.sandbox import runner as sandbox
from grouprl.rewards.scorer import Scorer, Scores
from grouprl.rollout.env_pool import LocalEnvPool, make_pool
from grouprl.rollout.generation import GenerationBackend, SamplingParams, make_backend
from grouprl.rollout.runner import episode_settings, run_episodes
from grouprl.rollout.scheduler import AsyncScheduler, Drawn, SyncScheduler
from grouprl.train.scheduling import add_times, build_scheduler, refuse_unsafe, staleness_metrics, step_staleness
from grouprl.train.advantages import AdvantageRecord, compute_advantage_record, estimator_options, reward_parts
from grouprl.train.parallel import SINGLE, DataParallel, GlobalBatch, shard_slice
from grouprl.train.dynamic_sampling import DynamicSampler
from grouprl.train.learner import Learner, StepSamples, UpdateStats, pack_samples
from grouprl.train.run_state import EvaluateFn, RunState, StepView
from grouprl.train.sampling import CurriculumSampler, RowSampler
from grouprl.train.step_metrics import batch_metrics
from grouprl.train.trainer_state import resume_trainer, save_trainer
from grouprl.user_code import import_callable


@dataclass
class StepRecord:
    """Everything one training step produced."""

    episodes: list[Episode]
    scores: Scores
    advantages: AdvantageRecord
    samples: StepSamples
    update: UpdateStats
    seconds: dict[str, float] = field(default_factory=dict)  # per phase
    rollout_stats: dict[str, float] = field(default_factory=dict)  # async: staleness, producer times
    token_signal: list | None = None  # distillation: per sample, [token, student, teacher log-prob] (Distiller)


class Trainer:
    def __init__(
        self,
        cfg: Config,
        policy: Policy,
        task,
        scorer: Scorer | None = None,
        backend: GenerationBackend | None = None,
        console=None,
        observers: list | None = None,
        parallel: DataParallel = SINGLE,
        evaluate: EvaluateFn | None = None,
    ):
        self.cfg, self.policy, self.task, self.console, self.parallel = cfg, policy, task, console, parallel
        self.observers = list(observers or [])  # job/observer.py: after_step, after_checkpoint, after_train
        self._evaluate = evaluate  # the job's one evaluation (job/evaluate.py), offered to observers
        self._saved_step = -1
        shard_slice(cfg.rollout.batch_size, parallel.info)  # refuse an uneven split before any work
        self.out = Path(cfg.train.output_dir)
        self.scorer = scorer or Scorer.from_config(cfg, task)
        self.backend = backend or make_backend(policy, cfg)
        self.learner = Learner(cfg, policy, parallel)
        self.sampling = SamplingParams.for_rollout(cfg)
        self.settings = episode_settings(cfg, task)
        objective = cfg.objective
        curriculum, dynamic = objective.curriculum, objective.dynamic_sampling
        self.sampler = (
            RowSampler(task.train_rows, cfg.train.seed)
            if curriculum is None
            else CurriculumSampler(
                task.train_rows, cfg.train.seed, curriculum.skip_steps, curriculum.max_skipped_fraction
            )
        )
        self.dynamic = (
            None
            if dynamic is None
            else DynamicSampler(dynamic.metric, dynamic.max_batches, cfg.rollout.batch_size, parallel)
        )
        self.pool = make_pool(cfg.rollout.env_workers, cfg.rollout.ray_address) if task.multi_step else LocalEnvPool()
        refuse_unsafe(cfg, task, self.scorer, parallel)  # what an async producer cannot run, before any work
        self.estimator = get_estimator(cfg.algorithm.advantage)
        self.estimator_options = estimator_options(cfg.algorithm, self.estimator)
        key = cfg.algorithm.state_key
        self.state_key = import_callable(key, "state_key") if key else None
        self.step = 0
        self.run_state = RunState()  # carried by checkpoints: the base model, the eval before RL, the best
        self.last_record: StepRecord | None = None
        self._scheduler: SyncScheduler | AsyncScheduler | None = None  # built at the first step (after resume)
        self.dropped_stale = 0  # async: batches refused for a token older than max_staleness

    # --- the five phases, in train_step's order ----------------------------------------------
    def rollout(self, round_index: int = 0) -> list[Episode]:
        """This process's share of one batch of groups, generated now by the trainer's backend."""
        return self.run(self.draw(round_index), self.backend)

    def draw(self, index: int) -> Drawn:
        """Batch ``index``'s rows: every process draws the same (global data position) and keeps its share; groups
        are numbered where born (``index``: a dynamic-sampling round, or the async stream's batch), never later."""
        batch_size = self.cfg.rollout.batch_size
        rows = self.parallel.rows(self.sampler.next(batch_size))
        return Drawn(rows, index * batch_size + self.parallel.info.rank * len(rows), self.sampler.position)

    def run(self, drawn: Drawn, backend: GenerationBackend) -> list[Episode]:
        return run_episodes(
            [self.task.env_factory(row) for row in drawn.rows],
            drawn.rows,
            self.cfg.rollout.num_generations,
            backend,
            self.policy.tokenizer,
            self.sampling,
            settings=self.settings,
            seeds=[self.task.seed_of(row) for row in drawn.rows],
            pool=None if isinstance(self.pool, LocalEnvPool) else self.pool,  # local: one per call (per producer)
            first_group=drawn.first_group,
            policy_version=self.step,  # an agent's calls record it (agent episodes)
        )

    def produce(self, drawn: Drawn, backend: GenerationBackend) -> tuple[list[Episode], Scores, dict[str, float]]:
        """Generate and score one drawn batch (on the producer's thread in the async modes)."""
        seconds: dict[str, float] = {}
        phase = _timer(seconds)
        with phase("generation_time"):
            episodes = self.run(drawn, backend)
        with phase("score_time"):
            scores = self.score(episodes)
        return episodes, scores, seconds

    def score(self, episodes: list[Episode]) -> Scores:
        return self.scorer.score(episodes)

    def gather(self, episodes: list[Episode], scores: Scores) -> tuple[GlobalBatch, Scores]:
        """Every process's episodes of this step with their verdicts, and the whole batch's score metrics
        (one process: its own, unchanged)."""
        batch, shares = self.parallel.globalize(episodes, (scores.verdicts, scores.parts))
        verdicts = [v for share, _ in shares for v in share]
        parts = {key: [p for _, share in shares for p in share[key]] for key in scores.parts}
        metrics = self.parallel.mean_metrics(scores.metrics)
        if "reward_errors" in metrics:  # a count: the whole batch's
            metrics["reward_errors"] = float(sum(bool(v.errors) for v in verdicts))
        return batch, Scores.of(verdicts, parts, metrics)

    def advantages(self, episodes: list[Episode], scores: Scores) -> AdvantageRecord:
        parts = None
        if self.estimator.wants_parts:  # each reward's own score (gdpo), with its weight in the episode score
            weights = {
                **self.scorer.weights,
                **{r.name: w for r, w in zip(self.scorer.learned, self.scorer.learned_weights)},
            }
            parts = reward_parts(scores.verdicts, weights)
        return compute_advantage_record(
            episodes,
            scores.episode,
            [v.step_rewards for v in scores.verdicts],
            self.cfg.algorithm,
            self.estimator,
            self.estimator_options,
            self.state_key,
            self.cfg.rollout.invalid_penalty == "on_step",
            parts,
        )

    def samples(self, batch: GlobalBatch, advantages: AdvantageRecord) -> StepSamples:
        """This process's share of the batch as training samples, with its share of the advantages."""
        return pack_samples(
            batch.local,
            advantages.advantage[batch.local_steps()],
            self.policy.tokenizer.pad_token_id,
            self.cfg.algorithm.mask_truncated_completions,
        )

    def update(self, samples: StepSamples) -> UpdateStats:
        stats = self.learner.update(samples)
        # engines with their own weight copy (vLLM, the async producer's) take the new ones, as version step + 1
        sync_seconds = self.scheduler().after_update(self.policy.model, self.step + 1)
        if self.cfg.rollout.rollout_mode != "sync":
            stats["async/weight_sync_time"] = sync_seconds
        return stats

    def scheduler(self) -> SyncScheduler | AsyncScheduler:
        """Built at the first step, after a resume has set the weights, the step and the data position."""
        if self._scheduler is None:
            position = lambda: self.sampler.position  # noqa: E731 - sync reads the sampler's live position
            self._scheduler = build_scheduler(self.cfg, self.backend, self.draw, self.produce, position, self.step)
        return self._scheduler

    def collect(self, seconds: dict[str, float], stats: dict[str, float]) -> tuple[GlobalBatch, Scores]:
        """The scheduler's next batch of finished groups, gathered; with dynamic sampling, rounds of them until
        the batch is full (``train/dynamic_sampling.py``). The curriculum sees every round's verdicts. A batch
        with a token older than ``max_staleness`` is never trained (counted; the bound makes it rare)."""
        rounds, bound = [0], self.cfg.rollout.max_staleness

        def one_round() -> tuple[GlobalBatch, Scores]:
            while True:
                produced = self.scheduler().next_batch(rounds[0])
                rounds[0] += 1
                add_times(produced, seconds, stats)
                batch, scores = self.gather(produced.episodes, produced.scores)
                if not staleness_metrics(batch.episodes, self.step, bound)[1]:  # the same on every process
                    break
                self.dropped_stale += 1
            self.sampler.observe(batch.episodes, scores.verdicts, self.step)
            return batch, scores

        self.sampler.start_step(self.step)
        return one_round() if self.dynamic is None else self.dynamic.collect(one_round)

    def train_step(self) -> StepRecord:
        seconds: dict[str, float] = {}
        stats: dict[str, float] = {}
        phase = _timer(seconds)
        batch, scores = self.collect(seconds, stats)
        stats.update(step_staleness(self.cfg.rollout, batch.episodes, self.step, self.dropped_stale))
        with phase("advantage_time"):
            advantages = self.advantages(batch.episodes, scores)
        samples = self.samples(batch, advantages)
        with phase("update_time"):
            update = self.update(samples)
        signal = self.learner.distill.token_signal() if self.learner.distill is not None else None
        return StepRecord(batch.episodes, scores, advantages, samples, update, seconds, stats, signal)

    def metrics(self, record: StepRecord) -> dict[str, float]:
        """What metrics.jsonl records for a step."""
        elapsed = sum(record.seconds.values())
        batch = record.samples.batch
        n_tokens = self.parallel.total(float(batch.completion_mask.sum() + batch.prompt_mask.sum()))
        return {
            **record.update,
            **batch_metrics(
                record.episodes,
                record.scores,
                record.advantages,
                self.cfg.rollout.num_generations,
                self.scorer.part_keys,
                self.task.multi_step,
            ),
            **record.scores.metrics,
            "sandbox_fallbacks": float(sandbox.fallback_count()),  # runs without bubblewrap isolation
            "sandbox_infra_errors": float(sandbox.infra_error_count()),  # runs the sandbox could not start
            "step_time": elapsed,
            **record.seconds,
            "tokens_per_second": n_tokens / elapsed,
            "learning_rate": self.learner.learning_rate,
            **self.sampler.metrics(),
            **record.rollout_stats,
        }

    # --- the loop -------------------------------------------------------------------------
    def resume(self, ckpt: str) -> None:
        """Every process: the same optimizer/scheduler/learned state, its own RNG stream, the global data
        position (``train/trainer_state.py``)."""
        resume_trainer(self, ckpt)

    def checkpoint(self) -> Path:
        """Save this step's checkpoint (once) and announce it to the observers (``train/trainer_state.py``)."""
        if self._saved_step != self.step:
            save_trainer(self)
            self._saved_step = self.step
        return self.out / f"checkpoint-{self.step}"

    def data_position(self) -> int:
        """After the last batch trained: rows a producer had in flight are regenerated by a resumed run."""
        return self.sampler.position if self._scheduler is None else self._scheduler.data_position

    def view(self) -> StepView:
        """What observers see (``train/run_state.py``)."""
        return StepView(
            self.step, self.out, self.parallel.is_main, self.run_state, self.last_record, self.checkpoint, self.evaluate
        )

    def evaluate(self, rows: list[dict[str, Any]], k: int, params: SamplingParams, out_path: Path | None) -> dict:
        """The job's evaluation (``job/evaluate.py``) with the current policy, scorer and episode settings."""
        if self._evaluate is None:
            raise RuntimeError("this Trainer was built without an evaluation (Trainer(..., evaluate=...))")
        backend = self.backend if self._scheduler is None else self._scheduler.evaluation_backend  # async: not mid-push
        return self._evaluate(
            backend, self.policy.tokenizer, self.task, rows, params, self.scorer, out_path, self.settings, k=k
        )

    def train(self, sink: Sink) -> list[dict[str, float]]:
        """Steps until ``max_steps``: each logged, shown to the observers (logs, evaluation, completions, hub,
        rotation) and, every ``save_steps``, checkpointed after them; then the final checkpoint."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        train, history = self.cfg.train, []
        columns = (TextColumn(self.cfg.algorithm.advantage), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, TextColumn("{task.fields[info]}"), console=sink.console) as progress:
            bar = progress.add_task("train", total=train.max_steps, completed=self.step, info="")
            try:
                while self.step < train.max_steps:
                    metrics = self.logged_step(sink)
                    history.append({"step": self.step, **metrics})
                    info = f"reward {metrics['reward']:.3f} acc {metrics['accuracy']:.2f}"
                    progress.update(bar, completed=self.step, info=info)
            except BaseException:  # a failure or a SIGTERM's stop: no producer may be left inside torch at exit
                self.close()
                raise
        self.close()
        self.checkpoint()
        for observer in self.observers:  # logs closed, hub uploads finish, ...
            observer.after_train(self.view())
        return history

    def logged_step(self, sink: Sink) -> dict[str, float]:
        """One step, logged, shown to the observers (logs first, then a SIGTERM's save and stop, evaluation,
        completions, hub, rotation) and, every ``save_steps``, checkpointed after them."""
        record = self.train_step()
        self.last_record = record  # observers see the step's records
        self.step += 1
        metrics = self.metrics(record)
        sink.log(self.step, metrics)
        for observer in self.observers:
            observer.after_step(self.view(), self.step, metrics)
        save_steps = self.cfg.train.save_steps
        if save_steps and self.step % save_steps == 0 and self.step < self.cfg.train.max_steps:
            self.checkpoint()  # after the evaluation: the checkpoint's run state knows this step's best
        return metrics

    def close(self) -> None:  # the rollout producer (batches in flight dropped) and the environment pool
        if self._scheduler is not None:
            self._scheduler.close()
        self.pool.close()


def _timer(seconds: dict[str, float]):
    @contextlib.contextmanager
    def phase(name: str):
        start = time.perf_counter()
        yield
        seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start  # rounds of one step add up

    return phase
