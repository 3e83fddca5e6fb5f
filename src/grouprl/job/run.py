"""The whole job: (build + SFT the tiny model) -> eval -> RL -> eval -> plot -> summary.

Under a launcher (accelerate, torchrun) every process runs this; process 0 alone builds the
tiny model and writes config.json, eval JSONL, metrics, the plot and summary.json.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from grouprl.algos.advantages import get_estimator
from grouprl.config import Config, ConfigError, flat_dict
from grouprl.config.redact import redact
from grouprl.observe.disk import DiskFull, disk_full
from grouprl.observe.sinks import MetricsSink, NullSink, Sink
from grouprl.models.loading import load_policy, pick_device
from grouprl.rewards.scorer import Scorer
from grouprl.rollout.generation import SamplingParams, release_backend
from grouprl.rollout.runner import episode_settings
from grouprl.tasks import load_task
from grouprl.data.chat_format import check_chat_template
from grouprl.job.agent_failures import AgentTrainer, preflight_agent
from grouprl.job.evaluate import evaluate
from grouprl.job.machine_load import busy_machine_advice
from grouprl.job.malloc_tuning import release_free_heap, tune_malloc
from grouprl.job.preemption import Preemption
from grouprl.job.progress import phase_progress
from grouprl.job.run_dir import RunFolder, RunPlan
from grouprl.job.setup import observers, prepare_schedule, prepare_tokenizer
from grouprl.job.warm_start import prepare_model, warm_start_alone
from grouprl.train.advantages import estimator_options
from grouprl.train.checkpoint import CheckpointError, check_world_size, read_checkpoint_state
from grouprl.train.objective import entropy_bonus_of, resolve_loss
from grouprl.train.parallel import DataParallel, broadcast_object, end_processes, shard_slice
from grouprl.train.trainer import Trainer

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run_name(cfg: Config) -> str:
    model = Path(cfg.model.model_name_or_path or "tiny").name
    return cfg.logging.run_name or f"grpo_{model}_K{cfg.rollout.num_generations}_steps{cfg.train.max_steps}"


def checked_task(cfg: Config):
    """The task, or a ``ConfigError`` naming the data problem (a bad row, an empty dataset)."""
    try:
        task = load_task(cfg)
    except ConfigError:
        raise
    except (ValueError, KeyError) as err:  # loaders name the file, row and field
        raise ConfigError(f"task '{cfg.task.task}': {err.args[0] if err.args else err}") from None
    if not task.train_rows:
        where = cfg.task.dataset_name_or_path or "the task's default data"
        raise ConfigError(f"task '{cfg.task.task}': no training rows in {where}; expected at least one")
    return task


def check_model_path(name: str | None) -> None:
    """A path-like model that does not exist is named as such (not as a malformed hub id)."""
    if name and (name.startswith((".", "/", "~")) or name.count("/") > 1) and not Path(name).expanduser().exists():
        raise ConfigError(
            f"config key 'model_name_or_path': {name} does not exist; expected a local model dir "
            "or a hub id like 'Qwen/Qwen2.5-0.5B-Instruct'"
        )


def packaged_model_folder(name: str | None, parallel: DataParallel, console: Console) -> str | None:
    """A packaged model's name (``smollm2-135m-instruct``) as its cached model folder, materialised
    once (``models/pretrained.py``); any other name or path as it is. One process writes the cache."""
    from grouprl.models.packaged import KNOWN_MODELS
    from grouprl.models.pretrained import cache_dir, is_materialized, materialize_pretrained

    if not name or name not in KNOWN_MODELS or Path(name).exists():
        return name
    if parallel.is_main and not is_materialized(cache_dir() / name):
        console.log(
            f"materialising {name} from its package into {cache_dir() / name} (once; 30 s for SmolLM2, minutes for larger ones)"
        )
    if parallel.distributed:
        return broadcast_object(str(materialize_pretrained(name)) if parallel.is_main else None)
    return str(materialize_pretrained(name))


def run_training(cfg: Config, console: Console | None = None) -> dict[str, Any]:
    """The run, holding its output_dir's lock from before its first write to its end (crash included)."""
    parallel = DataParallel.start()
    folder = RunFolder(cfg.train.output_dir)
    preemption = Preemption().install()  # SIGTERM: the step in progress, its checkpoint, exit 143
    try:
        if parallel.is_main:  # process 0 alone writes the folder
            folder.lock()
        return _run(cfg, console, parallel, folder, preemption)
    except (DiskFull, CheckpointError):  # already one line naming the device
        raise
    except Exception as err:
        full = disk_full(err, folder.out)  # any write of the run: one line naming the device and the folder
        if full is None:
            raise
        raise full from err
    finally:
        preemption.uninstall()
        folder.release()


def _run(
    cfg: Config, console: Console | None, parallel: DataParallel, folder: RunFolder, preemption: Preemption
) -> dict[str, Any]:
    """The run's phases in order: checks, warm start, evaluation before, the loop, evaluation after, summary."""
    main = parallel.is_main
    console = (console or Console()) if main else Console(quiet=True)
    start = time.perf_counter()
    _tune_process(cfg, main, console)
    plan, resume = _plan_folder(cfg, folder, parallel)
    task, scorer = _checked_before_any_model(cfg, parallel)
    saved, packaged = _checked_start(cfg, resume, parallel, console)
    if plan is not None:  # the main process, everything checked: the old run's files go, or its logs are cut back
        _apply_plan(cfg, folder, plan)
    seed_everything(cfg.train.seed)
    model_path, base_model = _warm_start(cfg, task, scorer, resume, saved, packaged, parallel, console)
    release_free_heap()  # the SFT's activations and optimizer, freed, go back to the kernel (malloc_tuning.py)
    policy = _load_policy(cfg, model_path, base_model, resume, parallel)
    prepare_tokenizer(cfg, policy.tokenizer)
    held_out = HeldOut(cfg, task, scorer, policy.tokenizer, console, folder.out / "eval" if main else None)
    trainer_class = AgentTrainer if cfg.tools.agent else Trainer  # agent runs: failed steps skipped, stop after N
    trainer = trainer_class(cfg, policy, task, scorer, console=console, parallel=parallel, evaluate=evaluate)
    trainer.run_state.base_model = base_model
    seed_everything(cfg.train.seed + parallel.info.rank)  # one sampling stream per process (rank 0: the seed)
    if resume:
        trainer.resume(resume)
    preflight_agent(trainer)  # an agent's one episode before any training: a failure stops the run here
    if not resume and held_out.rows:
        trainer.run_state.eval_before = held_out.evaluate("before", trainer.backend)
    sink = _metrics_sink(cfg, folder.out, console) if main else NullSink()
    try:
        trainer.observers += observers(cfg, sink, task.eval_rows, task.multi_step, preemption)
        trainer.train(sink)
        trainer.learner.release()  # checkpointed: Adam's moments are not held through the evaluation after
        release_free_heap()
        after = held_out.evaluate("after", trainer.backend) if held_out.rows else None
        summary = _summary(trainer, held_out, after, model_path, folder.out, main, start)
        sink.summary(summary)
    finally:
        sink.close()
        release_backend(trainer.backend)  # a second run in this process starts from a clean engine state
    if main:
        (folder.out / "summary.json").write_text(json.dumps(summary, indent=2))
    end_processes()
    return summary


def _tune_process(cfg: Config, main: bool, console: Console) -> None:
    """Threads and malloc as the config asks; on a busy machine, one line saying so (step times read against it)."""
    if cfg.runtime.num_threads:
        torch.set_num_threads(cfg.runtime.num_threads)
    if cfg.runtime.tune_malloc:
        tune_malloc()
    advice = busy_machine_advice() if main else None
    if advice:  # once, at the start: the run's step times are read against it
        console.log(advice)


def _plan_folder(cfg: Config, folder: RunFolder, parallel: DataParallel) -> tuple[RunPlan | None, str | None]:
    """What becomes of the output folder (the main process's plan; ``None`` on the others) and the checkpoint
    resumed from, known to every process. Checked, not yet changed: a resumed run's checkpoint is read through
    before any log is cut."""
    plan = folder.plan(cfg) if parallel.is_main else None
    resume = plan.resume if plan is not None else None
    if parallel.distributed:  # the other processes learn it from the main one
        resume = broadcast_object(resume)
    return plan, resume


def _apply_plan(cfg: Config, folder: RunFolder, plan: RunPlan) -> None:
    folder.apply(plan)
    (folder.out / "config.json").write_text(json.dumps(redact(cfg.model_dump()), indent=2))  # no api_key in clear


def _checked_before_any_model(cfg: Config, parallel: DataParallel) -> tuple[Any, Scorer]:
    """The task and the scorer, every name and option of the run resolved once, before any model loads."""
    task = checked_task(cfg)  # data and reward names are checked before any model loads
    try:  # every reward resolved once, before any model loads (a sandboxed file is read, never imported)
        scorer = Scorer.from_config(cfg, task)
    except (KeyError, ValueError) as err:
        raise ConfigError(f"config key 'rewards': {err.args[0]}") from None
    try:  # the estimator and its options, likewise
        estimator_options(cfg.algorithm, get_estimator(cfg.algorithm.advantage))
    except (KeyError, ValueError, TypeError) as err:
        raise ConfigError(f"config keys 'advantage'/'advantage_options': {err.args[0]}") from None
    resolve_loss(cfg), entropy_bonus_of(cfg)  # the loss, its options and the entropy bonus, likewise
    prepare_schedule(cfg, task)  # epochs, warmup ratio, save strategy -> steps
    check_chat_template(cfg.prompts.chat_template, cfg.prompts.chat_template_kwargs)  # renders, before any model
    shard_slice(cfg.rollout.batch_size, parallel.info)  # an uneven split: refused before any model loads
    return task, scorer


def _checked_start(
    cfg: Config, resume: str | None, parallel: DataParallel, console: Console
) -> tuple[dict[str, Any], str | None]:
    """What the run starts from: a checkpoint's saved state (its world size checked), or the model's folder
    (a packaged model materialised once; ``None`` for the tiny model)."""
    if resume:
        saved = read_checkpoint_state(resume)
        check_world_size(
            saved.get("world_size", 1),
            parallel.info,
            cfg.runtime.reshard_on_resume,
            f"--resume_from_checkpoint {resume}",
        )
        return saved, None
    check_model_path(cfg.model.model_name_or_path)
    return {}, packaged_model_folder(cfg.model.model_name_or_path, parallel, console)


def _warm_start(
    cfg: Config,
    task,
    scorer: Scorer,
    resume: str | None,
    saved: dict[str, Any],
    packaged: str | None,
    parallel: DataParallel,
    console: Console,
) -> tuple[str, str]:
    """``(model_path, base_model)``: the checkpoint and the model it started from, the model named (SFT-warmed
    with ``warm_start: sft``), or the tiny model built and SFT-warmed (by process 0 alone; the others get its path)."""
    if resume:
        return resume, saved.get("extra", {}).get("base_model", resume)
    if packaged and cfg.train.warm_start != "sft":
        return packaged, packaged
    model_path = (
        prepare_model(cfg, task, scorer, console, packaged)
        if not parallel.distributed
        else broadcast_object(warm_start_alone(cfg, packaged) if parallel.is_main else "")
    )
    return model_path, model_path


def _load_policy(cfg: Config, model_path: str, base_model: str, resume: str | None, parallel: DataParallel):
    device = parallel.device or pick_device(cfg.runtime.device)
    return load_policy(
        cfg.model,
        model_path,
        device,
        need_reference=cfg.algorithm.beta > 0,
        reference_path=base_model,
        revision=None if resume else cfg.model.model_revision,
        attn_implementation=cfg.model.attn_implementation,
    )


class HeldOut:
    """The held-out evaluation before and after RL: the first ``n_eval`` held-out rows, greedy, written to
    ``eval/<when>.jsonl`` (``folder``; ``None`` on the processes other than 0)."""

    def __init__(self, cfg: Config, task, scorer: Scorer, tokenizer, console: Console, folder: Path | None):
        self.task, self.scorer, self.tokenizer, self.console, self.folder = task, scorer, tokenizer, console, folder
        self.rows = task.eval_rows[: cfg.eval.n_eval]
        self.params = SamplingParams.for_eval(cfg)
        self.settings = episode_settings(cfg, task)
        self.measure = "success rate" if task.multi_step else "accuracy"

    def evaluate(self, when: str, backend) -> dict[str, Any]:
        """``when``: ``before`` or ``after`` (RL); ``backend``: the trainer's generation backend."""
        with phase_progress(self.console, f"evaluating {when} RL", len(self.rows)) as progress:
            result = evaluate(
                backend,
                self.tokenizer,
                self.task,
                self.rows,
                self.params,
                self.scorer,
                self.folder / f"{when}.jsonl" if self.folder is not None else None,
                self.settings,
                progress=progress,
            )
        self.console.log(f"held-out {self.measure} {when} RL: {result['accuracy']:.3f} (n={result['n']})")
        release_free_heap()
        return result


def _metrics_sink(cfg: Config, out: Path, console: Console) -> Sink:
    return MetricsSink(
        str(out),
        cfg.logging.report_to,
        cfg.logging.wandb_project,
        run_name(cfg),
        redact(flat_dict(cfg)),
        logging_steps=cfg.logging.logging_steps,
        console=console,
        entity=cfg.logging.wandb_entity,
        group=cfg.logging.wandb_run_group,
    )


def _summary(
    trainer: Trainer,
    held_out: HeldOut,
    after: dict[str, Any] | None,
    model_path: str,
    out: Path,
    main: bool,
    start: float,
) -> dict[str, Any]:
    """summary.json: the accuracies before and after, the run's files (the reward curve plotted here)."""
    plot = None
    rollouts = out / "rollouts" / "rollouts.jsonl"
    if main and rollouts.is_file() and rollouts.stat().st_size:
        from grouprl.observe.plots import plot_rollouts

        plot = str(plot_rollouts(rollouts, out / "reward_curve.png"))
    before_rl = trainer.run_state.eval_before  # measured above, or restored from the checkpoint
    return {
        "task": held_out.task.name,
        "model": model_path,
        "steps": trainer.step,
        "accuracy_before": before_rl["accuracy"] if before_rl else None,
        "accuracy_after": after["accuracy"] if after else None,
        "n_eval": len(held_out.rows),
        "mean_new_tokens_after": after["completions/mean_length"] if after else None,
        "eval_before": before_rl,
        "eval_after": after,
        "wall_seconds": round(time.perf_counter() - start, 1),
        "reward_curve": plot,
        "rollouts": str(rollouts) if rollouts.is_file() else None,
        "metrics": str(out / "metrics.jsonl"),
        "final_checkpoint": str(out / f"checkpoint-{trainer.step}"),
        "best_checkpoint": asdict(trainer.run_state.best) if trainer.run_state.best else None,
        "hub_revisions": trainer.run_state.hub_revisions,
    }
