"""The run's setup around the loop: schedule from epochs/ratios, output-dir guard, chat template,
and the observers (evaluation every eval_steps, checkpoint rotation, hub pushes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import logging

from grouprl.config import Config, ConfigError
from grouprl.config import resolve_schedule
from grouprl.data.chat_format import apply_chat_template
from grouprl.job.observer import TrainObserver

log = logging.getLogger(__name__)


def prepare_schedule(cfg: Config, task) -> None:
    """Steps from epochs, warmup from its ratio, saves from the strategy (a used output dir is
    refused or prepared by ``job/run_dir.py``)."""
    schedule = resolve_schedule(cfg, len(task.train_rows))
    log.debug("schedule: %s (from %d training rows)", schedule, len(task.train_rows))


def prepare_tokenizer(cfg: Config, tokenizer) -> None:
    apply_chat_template(tokenizer, cfg.prompts.chat_template)


def observers(
    cfg: Config, sink, eval_rows: list[dict[str, Any]], multi_step: bool, preemption: TrainObserver | None = None
) -> list[TrainObserver]:
    """The step logs first (rollout records, trajectories), then a SIGTERM's save and stop (``preemption``:
    after the logs, so a preempted step loses none of its records; before evaluation, which may take long),
    then evaluation (it may save the best step), then hub pushes, then rotation (which spares checkpoints still
    uploading). Several processes: every one evaluates (generation is collective under FSDP), process 0 alone
    writes logs, pushes and rotates; the save is collective and comes at the same point on every process."""
    from grouprl.job.checkpoint_observers import CheckpointRotation, HubPushObserver
    from grouprl.job.periodic_eval import PeriodicEval
    from grouprl.job.rollout_logs import RolloutLogs
    from grouprl.train.parallel import process_info

    found: list[TrainObserver] = []
    main = process_info().is_main
    if main and (cfg.logging.log_rollouts or cfg.logging.save_trajectories_every):
        found.append(
            RolloutLogs(
                Path(cfg.train.output_dir), cfg.logging.log_rollouts, cfg.logging.save_trajectories_every, multi_step
            )
        )
    if preemption is not None:
        found.append(preemption)
    if cfg.runtime.tune_malloc:  # glibc keeps each thread's freed memory: hand it back between steps
        from grouprl.job.malloc_tuning import ReleaseFreeHeap

        found.append(ReleaseFreeHeap())
    if cfg.eval.eval_strategy == "steps":
        found.append(PeriodicEval(cfg, sink, eval_rows))
    if not main:
        return found
    if cfg.logging.num_completions_to_print:  # the behaviour changing, in the terminal
        from grouprl.job.completion_samples import CompletionSamples

        found.append(
            CompletionSamples(
                sink.console, cfg.logging.num_completions_to_print, cfg.logging.completions_print_steps, cfg.train.seed
            )
        )
    hub = cfg.hub
    pusher = None
    if hub.push_to_hub or hub.push_to_hub_revision:
        if not hub.hub_model_id:
            raise ConfigError("config keys 'push_to_hub'/'push_to_hub_revision' need 'hub_model_id' (org/name)")
        from grouprl.hub.revisions import HubPusher, HubTarget

        pusher = HubPushObserver(
            HubPusher(
                HubTarget(hub.hub_model_id, hub.hub_model_revision, hub.hub_private_repo, hub.overwrite_hub_revision)
            ),
            hub.push_to_hub_revision,
            hub.push_to_hub,
        )
        found.append(pusher)
    if cfg.train.save_total_limit:
        found.append(CheckpointRotation(cfg.train.save_total_limit, pusher.busy if pusher else None))
    return found
