"""The trainer's side of the rollout scheduler: which scheduler a config asks for (sync, one_step_off, async),
what an asynchronous producer cannot make safe (refused in one line before any work), and the staleness of a
batch the learner takes.

The scheduler itself (``rollout/scheduler.py``) knows nothing of the trainer: it is handed a function that
draws a batch's rows and one that generates and scores them. The policy version is the number of
updates behind the weights (the trainer's step); the learner trains at version ``step`` on tokens sampled
at ``Step.policy_version``: their staleness is the difference (``docs/async.md``).
"""

from __future__ import annotations

from grouprl.config import Config, ConfigError
from grouprl.records import Episode
from grouprl.rollout.generation import HFBackend
from grouprl.rollout.scheduler import AsyncScheduler, Draw, Produce, Produced, SyncScheduler
from grouprl.rollout.weight_sync import GeneratorCopy


def refuse_unsafe(cfg: Config, task, scorer, parallel) -> None:
    """One clear line for each combination the producer cannot run safely."""
    rollout, mode = cfg.rollout, cfg.rollout.rollout_mode
    why = None
    if mode == "sync":
        return
    if cfg.objective.curriculum is not None:
        why = "a curriculum reorders rows by verdicts the producer has not seen yet"
    elif scorer.learned:
        why = "learned rewards update on every batch (and gather across processes) while the producer scores"
    elif parallel.fsdp:
        why = "FSDP's sharded parameters cannot be copied into a generator"
    elif task.multi_step and rollout.env_workers > 1 and rollout.max_inflight > 1 and mode == "async":
        why = "environment episodes share one Ray environment pool: set max_inflight: 1"
    elif rollout.generation_backend == "vllm" and cfg.speed.vllm_sleep_during_update:
        why = "the colocated vLLM engine sleeps during the update: set vllm_sleep_during_update: false"
    if why:
        raise ConfigError(f"config key 'rollout_mode': {mode} cannot run here: {why}; or use rollout_mode: sync")


def build_scheduler(
    cfg: Config, backend, draw: Draw, produce: Produce, position, version: int
) -> SyncScheduler | AsyncScheduler:
    """The scheduler ``rollout_mode`` names (``refuse_unsafe`` has passed), its generator at ``version``."""
    rollout = cfg.rollout
    if rollout.rollout_mode == "sync":
        return SyncScheduler(draw, produce, backend, position)
    # hf generates on the policy itself: the producer needs a second model; other engines hold their own
    generator = (
        GeneratorCopy.for_hf(backend, version) if isinstance(backend, HFBackend) else GeneratorCopy(backend, version)
    )
    one_step_off = rollout.rollout_mode == "one_step_off"
    return AsyncScheduler(
        draw,
        produce,
        generator,
        max_staleness=1 if one_step_off else rollout.max_staleness,
        workers=1 if one_step_off else rollout.max_inflight,
        timeout=rollout.rollout_timeout,
        position=position(),
        mode=rollout.rollout_mode,
    )


def token_staleness(episodes: list[Episode], version: int) -> list[tuple[int, int]]:
    """(staleness, generated tokens) of every step that carries a version."""
    return [
        (version - s.policy_version, len(s.action_ids))
        for ep in episodes
        for s in ep.steps
        if s.policy_version is not None
    ]


def staleness_metrics(episodes: list[Episode], version: int, max_staleness: int) -> tuple[dict[str, float], bool]:
    """``async/staleness_mean`` (over generated tokens), ``async/staleness_max`` and ``async/staleness_share/<lag>``
    (the histogram); and whether any token is older than the bound (the batch must not be trained)."""
    pairs = token_staleness(episodes, version)
    if not pairs:
        return {}, False
    tokens = sum(n for _, n in pairs)
    mean = sum(s * n for s, n in pairs) / max(tokens, 1)
    worst = max(s for s, _ in pairs)
    stats = {"async/staleness_mean": float(mean), "async/staleness_max": float(worst)}
    for lag in range(max_staleness + 1):  # the histogram: each lag's share of the trained tokens (dashboard curves)
        stats[f"async/staleness_share/{lag}"] = sum(n for s, n in pairs if s == lag) / max(tokens, 1)
    return stats, worst > max_staleness


def add_times(produced: Produced, seconds: dict[str, float], stats: dict[str, float]) -> None:
    """The learner's seconds into the step's phases (its wait, in the async modes); the producer's, off the
    learner's path, into ``async/producer_*`` metrics (``step_time`` stays the learner's wall time)."""
    for key, value in produced.seconds.items():
        seconds[key] = seconds.get(key, 0.0) + value
    for key, value in produced.producer_seconds.items():
        stats[f"async/producer_{key}"] = stats.get(f"async/producer_{key}", 0.0) + value


def step_staleness(rollout, episodes: list[Episode], version: int, dropped: int) -> dict[str, float]:
    """The step's ``async/*`` staleness metrics (none in sync mode: the plain loop's metrics, unchanged)."""
    if rollout.rollout_mode == "sync":
        return {}
    stats = staleness_metrics(episodes, version, rollout.max_staleness)[0]
    return {**stats, "async/dropped_stale_batches": float(dropped)}
