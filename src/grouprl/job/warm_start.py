"""The warm start: build a tiny Qwen2 model for the task (when no model is named), then a deliberately short SFT
(the tiny model always, a named model with ``warm_start: sft``).

Single-turn tasks are fine-tuned on their gold solutions until greedy accuracy on held-back
training rows reaches ``sft_target_accuracy``; environments on played demonstrations (random
admissible moves, or the environment's expert moves) until sampled episodes act validly.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from grouprl.config import Config, ConfigError
from grouprl.models.tiny import init_tiny
from grouprl.rollout.sampling import SamplingParams, max_new_tokens_of
from grouprl.rollout.prompts import build_messages, format_action
from grouprl.rollout.conversation import ConversationSettings
from grouprl.rollout.runner import EpisodeSettings, episode_settings
from grouprl.job.evaluate import ENV_CHECK_EPISODES, check_accuracy
from grouprl.job.sft import sft_warm_start


def demonstrations(
    task, rows: list[dict[str, Any]], policy: str, settings: EpisodeSettings, seed: int = 0
) -> list[dict[str, Any]]:
    """(prompt messages, action completion) pairs from playing each row's environment.

    ``policy="expert"`` plays the environment's expert moves; ``"random"`` uniformly random
    admissible moves (it teaches the action format and a near-uniform policy, leaving the
    decisions to RL). Prompts come from the runner's own prompt builder, history included.
    """
    from grouprl.tasks.env_task import play

    rng = random.Random(seed)
    out = []
    for row in rows:
        history: list[tuple[str, str]] = []
        for instructions, obs, action, _ in play(task, row, policy, rng, settings.max_steps):
            completion = format_action(action, settings.action_pattern)
            messages = build_messages(
                instructions, history, obs, settings.history_length, settings.show_admissible_actions
            )
            out.append({"messages": messages, "gold_completion": completion})
            history.append((obs.text, completion))
    return out


def env_demonstrations(cfg: Config, task, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    settings = episode_settings(cfg, task)
    if isinstance(settings, ConversationSettings):
        raise ConfigError(
            "environment demonstrations play one action a step; with episode_mode: conversation the "
            "warm start plays expert conversations (job/tool_sft.py)"
        )
    return demonstrations(task, rows, cfg.train.sft_demonstrations, settings, cfg.train.seed)


def prepare_model(cfg: Config, task, scorer, console: Console, named: str | None = None) -> str:
    """The model RL starts from: ``named`` (a named model's folder) as it is, or SFT-warmed with ``warm_start:
    sft``; else the tiny model, built and (unless ``warm_start: none``) SFT-warmed."""
    if named is not None:
        return sft_warm(cfg, task, scorer, named, console) if cfg.train.warm_start == "sft" else named
    return prepare_tiny(cfg, task, scorer, console)


def prepare_tiny(cfg: Config, task, scorer, console: Console) -> str:
    """Build the tiny model for the task and warm it with a deliberately short SFT."""
    out = Path(cfg.train.output_dir)
    model_config, train = cfg.model, cfg.train
    tiny = init_tiny(
        task.tokenizer_corpus(),
        out / "tiny_model",
        model_config.tiny_hidden_size,
        model_config.tiny_num_layers,
        model_config.tiny_num_heads,
        seed=train.seed,
        tokenizer=task.tiny_tokenizer,
        max_positions=task.tiny_max_positions,
    )
    console.log(f"built tiny Qwen2 model at {tiny}")
    return str(tiny) if train.warm_start == "none" else sft_warm(cfg, task, scorer, str(tiny), console)


def sft_warm(cfg: Config, task, scorer, start: str, console: Console) -> str:
    """The SFT warm start from ``start``: expert conversations (tool tasks), demonstrations (environments) or
    gold solutions, each stopped early at its check; the folder of the warmed model."""
    train, out = cfg.train, Path(cfg.train.output_dir)
    if train.sft_steps == 0 or not task.has_gold_completions:
        if train.sft_steps:
            console.log("no SFT warm start: the task's rows have no gold completions (RL starts from the model as is)")
        return start
    conversation = episode_settings(cfg, task)
    if isinstance(conversation, ConversationSettings):  # tool calls: SFT on expert conversations
        from grouprl.job.tool_sft import sft_conversations

        return str(sft_conversations(cfg, task, scorer, start, conversation, console))
    if task.multi_step:
        return str(sft_environment(cfg, task, scorer, start, console))
    console.log(
        f"SFT warm start: up to {train.sft_steps} steps on gold solutions (TRL SFTTrainer)"
        + (f", stopping at {train.sft_target_accuracy:.0%} greedy accuracy" if train.sft_target_accuracy else "")
    )
    # Held-back training rows (never trained on) decide the early stop; the eval split stays untouched.
    n_check = min(200, len(task.train_rows) // 10)
    sft_rows, check_rows = task.train_rows[:-n_check], task.train_rows[-n_check:]
    stop_when = None
    if train.sft_target_accuracy:
        params = SamplingParams(max_new_tokens=max_new_tokens_of(cfg), greedy=True, batch_size=n_check)
        measure = check_accuracy(task, scorer, check_rows, params)

        def stop_when(model, tokenizer) -> bool:
            return measure(model, tokenizer)["accuracy"] >= train.sft_target_accuracy

    path = sft_warm_start(
        start,
        sft_rows,
        task.messages,
        out / "sft_model",
        max_steps=train.sft_steps,
        learning_rate=train.sft_learning_rate,
        batch_size=train.sft_batch_size,
        seed=train.seed,
        stop_when=stop_when,
        check_every=train.sft_check_every or 10,
    )
    return str(path)


def sft_environment(cfg: Config, task, scorer, tiny: str, console: Console) -> Path:
    """SFT on played demonstrations until the action format is learned.

    Demonstrations are played on levels no training or evaluation episode uses (seeds from
    2,000,000; calculator: the training questions). It stops at the first check (every 10
    steps) where *sampled* episodes (the rollout temperature, as RL will see them) on 32
    training levels make at most 5 % invalid actions and, with expert demonstrations and
    ``sft_target_accuracy`` set, succeed at least that often. With random demonstrations RL
    starts from a policy that acts validly but has not been taught which moves are good; with
    expert ones, from a deliberately unfinished imitation of the shortest paths.
    """
    train = cfg.train
    check_rows = task.train_rows[:ENV_CHECK_EPISODES]
    demo_rows = task.demonstration_rows(train.sft_demo_episodes, skip=ENV_CHECK_EPISODES)
    demos = env_demonstrations(cfg, task, demo_rows)
    console.log(
        f"SFT warm start: {len(demos)} {train.sft_demonstrations} demonstration steps from "
        f"{len(demo_rows)} episodes, up to {train.sft_steps} steps, stopping at <= 5% invalid actions"
        + (
            f" and {train.sft_target_accuracy:.0%} success"
            if train.sft_demonstrations == "expert" and train.sft_target_accuracy
            else ""
        )
    )
    params = SamplingParams.for_rollout(cfg, batch_size=ENV_CHECK_EPISODES)
    measure = check_accuracy(task, scorer, check_rows, params, episode_settings(cfg, task))
    target = train.sft_target_accuracy if train.sft_demonstrations == "expert" else None

    def stop_when(model, tokenizer) -> bool:
        result = measure(model, tokenizer)
        return result["invalid_action_rate"] <= 0.05 and (target is None or result["success_rate"] >= target)

    return sft_warm_start(
        tiny,
        demos,
        lambda r: r["messages"],
        Path(cfg.train.output_dir) / "sft_model",
        max_steps=train.sft_steps,
        learning_rate=train.sft_learning_rate,
        batch_size=train.sft_batch_size,
        seed=train.seed,
        stop_when=stop_when,
        check_every=train.sft_check_every or 10,
    )


LAUNCHER_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def warm_start_alone(cfg: Config, named: str | None = None) -> str:
    """:func:`prepare_model` in a child process that is no part of the process group.

    Process 0 calls this while the others wait: TRL's SFT trainer, run inside a launched
    process, would see the group and wait for the others' gradients forever."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in LAUNCHER_VARS and not k.startswith(("TORCHELASTIC_", "ACCELERATE_"))
    }
    proc = subprocess.run(
        [sys.executable, "-m", "grouprl.job.warm_start", json.dumps(cfg.model_dump()), named or ""],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the warm start failed (exit {proc.returncode}); see its output above")
    return proc.stdout.strip().splitlines()[-1]


def _warm_start_main(dumped: str, named: str) -> None:
    import grouprl.tasks  # noqa: F401 - the registered tasks and their config sections
    from grouprl.rewards.scorer import Scorer
    from grouprl.tasks import load_task

    cfg = Config.model_validate(json.loads(dumped))
    task = load_task(cfg)
    print(prepare_model(cfg, task, Scorer.from_config(cfg, task), Console(stderr=True), named or None))


if __name__ == "__main__":  # warm_start_alone's child
    _warm_start_main(sys.argv[1], sys.argv[2])
