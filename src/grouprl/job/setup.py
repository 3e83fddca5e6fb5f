"""The run's setup around the loop: schedule from epochs/ratios, output-dir guard, chat template,
and the observers (evaluation every eval_steps, checkpoint rotation, hub pushes)."""

from __future__ import annotations

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


def observers(cfg: Config, sink) -> list[TrainObserver]:
    """Evaluation first (it may save the best step), then hub pushes, then rotation (which spares
    checkpoints still uploading). Several processes: every one evaluates (generation is collective
    under FSDP), process 0 alone pushes and rotates."""
    from grouprl.job.checkpoint_observers import CheckpointRotation, HubPushObserver
    from grouprl.train.parallel import process_info
    from grouprl.job.periodic_eval import PeriodicEval

    found: list[TrainObserver] = []
    if cfg.eval.eval_strategy == "steps":
        found.append(PeriodicEval(cfg, sink))
    if not process_info().is_main:
        return found
    if cfg.logging.num_completions_to_print:  # the behaviour changing, in the terminal
        from grouprl.job.completion_samples import CompletionSamples

        found.append(CompletionSamples(sink.console, cfg.logging.num_completions_to_print,
                                       cfg.logging.completions_print_steps, cfg.train.seed))
    hub = cfg.hub
    pusher = None
    if hub.push_to_hub or hub.push_to_hub_revision:
        if not hub.hub_model_id:
            raise ConfigError("config keys 'push_to_hub'/'push_to_hub_revision' need 'hub_model_id' (org/name)")
        from grouprl.hub.revisions import HubPusher, HubTarget

        pusher = HubPushObserver(HubPusher(HubTarget(hub.hub_model_id, hub.hub_model_revision, hub.hub_private_repo,
                                                     hub.overwrite_hub_revision)),
                                 hub.push_to_hub_revision, hub.push_to_hub)
        found.append(pusher)
    if cfg.train.save_total_limit:
        found.append(CheckpointRotation(cfg.train.save_total_limit, pusher.busy if pusher else None))
    return found
