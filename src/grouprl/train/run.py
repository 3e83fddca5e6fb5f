"""The whole job: (build + SFT the tiny model) -> eval -> GRPO -> eval -> plot -> summary."""

from __future__ import annotations

import json
import logging
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from grouprl.config import Config, ConfigError, flat_dict
from grouprl.observe.sinks import MetricsSink
from grouprl.policy.loading import load_policy, pick_device
from grouprl.policy.tiny import init_tiny
from grouprl.rewards.pipeline import resolve_reward
from grouprl.rollout.generation import SamplingParams
from grouprl.tasks import Task, load_task
from grouprl.tasks.arithmetic import ALPHABET
from grouprl.tasks.env_task import DEMO_SEED_OFFSET, corpus, demonstrations, seeded_rows
from grouprl.train.evaluate import evaluate
from grouprl.train.checkpoint import read_checkpoint_state
from grouprl.train.grpo import GRPOTrainer, runner_options
from grouprl.train.sft import sft_warm_start

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def env_demonstrations(cfg: Config, task: Task, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    r = cfg.rollout
    return demonstrations(task, rows, cfg.train.sft_demonstrations, r.max_episode_steps, r.history_length,
                          r.action_pattern or None, r.show_admissible_actions, cfg.train.seed)


def task_corpus(task: Task, cfg: Config | None = None) -> str:
    """Every character the task can show or expect (arithmetic: all its options' characters)."""
    if task.multi_step:
        cfg = cfg or Config()
        return corpus(task, env_demonstrations(cfg, task, task.train_rows[:20] + task.eval_rows[:20]))
    rows = task.train_rows + task.eval_rows
    chars = {c for r in rows for c in r["question"] + r["gold_completion"]}
    if task.name == "arithmetic":
        chars |= set(ALPHABET)
    return "".join(sorted(chars))


def prepare_tiny(cfg: Config, task: Task, console: Console) -> str:
    """Build the tiny model for the task and warm it with a deliberately short SFT."""
    out = Path(cfg.train.output_dir)
    m, t = cfg.model, cfg.train
    tiny = init_tiny(task_corpus(task, cfg) + (task.system_prompt or ""), out / "tiny_model", m.tiny_hidden_size,
                     m.tiny_num_layers, m.tiny_num_heads, seed=t.seed)
    console.log(f"built tiny Qwen2 model at {tiny}")
    if t.sft_steps == 0:
        return str(tiny)
    if task.multi_step:
        return str(sft_environment(cfg, task, str(tiny), console))
    console.log(f"SFT warm start: up to {t.sft_steps} steps on gold solutions (TRL SFTTrainer)"
                + (f", stopping at {t.sft_target_accuracy:.0%} greedy accuracy" if t.sft_target_accuracy else ""))
    # Held-back training rows (never trained on) decide the early stop; the eval split stays untouched.
    n_check = min(200, len(task.train_rows) // 10)
    sft_rows, check_rows = task.train_rows[:-n_check], task.train_rows[-n_check:]
    stop_when = None
    if t.sft_target_accuracy:
        params = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens, greedy=True, batch_size=n_check)

        def stop_when(model, tokenizer) -> bool:
            acc = evaluate(model, tokenizer, task, check_rows, params, model.device)["accuracy"]
            return acc >= t.sft_target_accuracy

    path = sft_warm_start(str(tiny), sft_rows, task.messages, out / "sft_model", t.sft_steps, t.sft_learning_rate,
                          t.sft_batch_size, t.seed, stop_when)
    return str(path)


def sft_environment(cfg: Config, task: Task, tiny: str, console: Console) -> Path:
    """SFT on played demonstrations until the action format is learned.

    Demonstrations are played on levels no training or evaluation episode uses (seeds from
    2,000,000; calculator: the training questions). It stops at the first check (every 10
    steps) where *sampled* episodes (the rollout temperature, as RL will see them) on 32
    training levels make at most 5 % invalid actions and, with expert demonstrations and
    ``sft_target_accuracy`` set, succeed at least that often. With random demonstrations RL
    starts from a policy that acts validly but has not been taught which moves are good; with
    expert ones, from a deliberately unfinished imitation of the shortest paths.
    """
    t = cfg.train
    n_check = 32
    check_rows = task.train_rows[:n_check]
    if task.name in ("gridworld", "sokoban"):
        demo_rows = seeded_rows(t.sft_demo_episodes, DEMO_SEED_OFFSET)
    else:
        demo_rows = task.train_rows[n_check:n_check + t.sft_demo_episodes]
    demos = env_demonstrations(cfg, task, demo_rows)
    console.log(f"SFT warm start: {len(demos)} {t.sft_demonstrations} demonstration steps from "
                f"{len(demo_rows)} episodes, up to {t.sft_steps} steps, stopping at <= 5% invalid actions"
                + (f" and {t.sft_target_accuracy:.0%} success" if t.sft_demonstrations == "expert"
                   and t.sft_target_accuracy else ""))
    r = cfg.rollout
    params = SamplingParams(max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p,
                            top_k=r.top_k, batch_size=n_check)
    options = runner_options(cfg, task)

    target = t.sft_target_accuracy if t.sft_demonstrations == "expert" else None

    def stop_when(model, tokenizer) -> bool:
        result = evaluate(model, tokenizer, task, check_rows, params, model.device, options=options)
        return result["invalid_action_rate"] <= 0.05 and (target is None or result["success_rate"] >= target)

    return sft_warm_start(tiny, demos, lambda r: r["messages"], Path(cfg.train.output_dir) / "sft_model",
                          t.sft_steps, t.sft_learning_rate, t.sft_batch_size, t.seed, stop_when)


def eval_params(cfg: Config) -> SamplingParams:
    r, e = cfg.rollout, cfg.eval
    return SamplingParams(max_new_tokens=e.eval_max_new_tokens or r.max_new_tokens, temperature=r.temperature,
                          top_p=r.top_p, top_k=r.top_k, greedy=e.eval_greedy, batch_size=e.eval_batch_size)


def run_name(cfg: Config) -> str:
    model = Path(cfg.model.model_name_or_path or "tiny").name
    return cfg.logging.run_name or f"grpo_{model}_K{cfg.rollout.num_generations}_steps{cfg.train.max_steps}"


def run_training(cfg: Config, console: Console | None = None) -> dict[str, Any]:
    console = console or Console()
    start = time.perf_counter()
    out = Path(cfg.train.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.runtime.num_threads:
        torch.set_num_threads(cfg.runtime.num_threads)
    task = load_task(cfg)  # data and reward names are checked before any model loads
    for name in task.reward_names + ([task.correct_reward] if task.correct_reward else []):
        try:  # a sandboxed file is only read here (sandboxed_reward), never imported
            resolve_reward(name, cfg.task.sandbox_user_rewards)
        except KeyError as err:
            raise ConfigError(f"config key 'rewards': {err.args[0]}") from None
    (out / "config.json").write_text(json.dumps(cfg.model_dump(), indent=2))
    seed_everything(cfg.train.seed)

    resume = cfg.train.resume_from_checkpoint
    if resume:
        model_path = resume
        base_model = read_checkpoint_state(resume).get("extra", {}).get("base_model", resume)
    else:
        base_model = model_path = cfg.model.model_name_or_path or prepare_tiny(cfg, task, console)
    device = pick_device(cfg.runtime.device)
    policy = load_policy(cfg.model, model_path, device, need_reference=cfg.algorithm.beta > 0,
                         reference_path=base_model)
    eval_rows = task.eval_rows[: cfg.eval.n_eval]
    params = eval_params(cfg)
    options = runner_options(cfg, task)
    measure = "success rate" if task.multi_step else "accuracy"

    trainer = GRPOTrainer(cfg, policy, task, console)
    trainer.state["base_model"] = base_model
    seed_everything(cfg.train.seed)
    if resume:
        trainer.resume(resume)
    elif eval_rows:
        before = evaluate(policy.model, policy.tokenizer, task, eval_rows, params, device,
                          out / "eval" / "before.jsonl", options)
        trainer.state["eval_before"] = before
        console.log(f"held-out {measure} before RL: {before['accuracy']:.3f} (n={before['n']})")

    sink = MetricsSink(str(out), cfg.logging.report_to, cfg.logging.wandb_project, run_name(cfg),
                       flat_dict(cfg), cfg.logging.logging_steps, console)
    try:
        trainer.train(sink)
        after = None
        if eval_rows:
            after = evaluate(policy.model, policy.tokenizer, task, eval_rows, params, device,
                             out / "eval" / "after.jsonl", options)
            console.log(f"held-out {measure} after RL: {after['accuracy']:.3f} (n={after['n']})")
        plot = None
        rollouts = out / "rollouts" / "rollouts.jsonl"
        if rollouts.is_file() and rollouts.stat().st_size:
            from grouprl.observe.plots import plot_rollouts

            plot = str(plot_rollouts(rollouts, out / "reward_curve.png"))
        before = trainer.state.get("eval_before")
        summary = {
            "task": task.name,
            "model": model_path,
            "steps": trainer.step,
            "accuracy_before": before["accuracy"] if before else None,
            "accuracy_after": after["accuracy"] if after else None,
            "n_eval": len(eval_rows),
            "mean_new_tokens_after": after["mean_new_tokens"] if after else None,
            "eval_before": before,
            "eval_after": after,
            "wall_seconds": round(time.perf_counter() - start, 1),
            "reward_curve": plot,
            "rollouts": str(rollouts) if rollouts.is_file() else None,
            "metrics": str(out / "metrics.jsonl"),
            "final_checkpoint": str(out / f"checkpoint-{trainer.step}"),
        }
        sink.summary(summary)
    finally:
        sink.close()
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
