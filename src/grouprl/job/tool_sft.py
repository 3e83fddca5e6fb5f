"""The tool-calling warm start: SFT on expert conversations, trained on the assistant's tokens only.

A task with a scripted solver (``expert_reply(prompt_text) -> str``, e.g. ``tool_arithmetic``'s)
plays its conversations through the real runner, parser, tools and chat template
(``rollout/scripted.py``), and the model is fine-tuned on exactly the sequences and loss masks the
RL update will use (``train/conversation_samples.py``): tool results and template tokens are read,
the assistant's turns are learned. It stops after ``steps`` steps, or at the first check (every
``check_every`` steps) where ``stop_when(model, tokenizer)`` holds, so RL starts from a
deliberately unfinished imitation.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any, Callable

import torch

from grouprl.config import ConfigError
from grouprl.policy.scoring import completion_logps
from grouprl.job.evaluate import ENV_CHECK_EPISODES, check_accuracy
from grouprl.job.sft_band import SuccessBand
from grouprl.records import Episode
from grouprl.rollout.conversation import ConversationSettings, run_conversation_episodes
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tools.chat_template import ensure_tool_template
from grouprl.tools.metrics import tool_metrics
from grouprl.train.conversation_samples import pack_conversations


def expert_traces(
    task, tokenizer, settings: ConversationSettings, n_episodes: int, max_new_tokens: int = 256
) -> list[Episode]:
    """``n_episodes`` expert conversations on the task's SFT rows (seeds RL and evaluation never use)."""
    reply = task.expert_reply
    if reply is None:
        raise ConfigError(
            f"the tool SFT warm start plays a scripted solver; task {task.name!r} has none "
            "(Task.expert_reply): set sft_steps: 0, or give the task one"
        )
    rows = task.sft_rows(n_episodes)
    settings = dataclasses.replace(settings, max_conversation_tokens=None)  # the expert's turns are never cut
    episodes = run_conversation_episodes(
        [task.env_factory(r) for r in rows],
        rows,
        1,
        ScriptedBackend(tokenizer, reply),
        tokenizer,
        SamplingParams(max_new_tokens=max_new_tokens),
        settings,
        [task.seed_of(r) for r in rows],
    )
    failed = [ep for ep in episodes if not ep.success]
    if failed:
        errors = [r["content"] for s in failed[0].steps for r in (s.tool_results or []) if r.get("error")]
        raise RuntimeError(
            f"expert traces: {len(failed)} of {len(episodes)} expert conversations failed; the first "
            f"ended ({failed[0].end_reason}) with {failed[0].steps[-1].action_text[:80]!r}"
            + (f" after the tool error {errors[0][:120]!r}" if errors else "")
            + f" (tools: {', '.join(t.name for t in settings.tools) or 'none'})"
        )
    return episodes


def sft_update(model, optimizer, part) -> float:
    """One step of cross-entropy on the generated tokens of ``part`` (a packed TokenBatch); the loss."""
    logps, _ = completion_logps(model, part)
    mask = part.completion_mask.float()
    loss = -(logps * mask).sum() / mask.sum().clamp(min=1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def check_due(step: int, every: int, first: int | None = None) -> bool:
    """SFT's early-stop checks: at step ``first`` (empty: ``every``), then every ``every`` steps."""
    start = first or every
    return step >= start and (step - start) % every == 0


def tool_sft(
    model_dir: str,
    task,
    settings: ConversationSettings,
    out_dir: str | Path,
    steps: int,
    learning_rate: float,
    batch_size: int,
    seed: int,
    n_episodes: int = 400,
    stop_when: Callable[[Any, Any], bool] | None = None,
    check_every: int = 20,
    console=None,
    first_check: int | None = None,
) -> Path:
    from rich.progress import Progress
    from transformers import AutoModelForCausalLM

    from grouprl.models.loading import load_tokenizer

    torch.manual_seed(seed)
    tokenizer = load_tokenizer(model_dir)
    ensure_tool_template(tokenizer, settings.chat_template)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    episodes = expert_traces(task, tokenizer, settings, n_episodes)
    n_steps = sum(len(ep.steps) for ep in episodes)
    batch = pack_conversations(episodes, torch.zeros(n_steps), tokenizer.pad_token_id, mask_truncated=False).batch
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    rng = random.Random(seed)
    order: list[int] = []
    model.train()
    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task("tool SFT", total=steps)
        for step in range(1, steps + 1):
            if isinstance(stop_when, SuccessBand) and step == (first_check or check_every):
                stop_when.start(model)  # the weights before the first checked step: under the band (SuccessBand.start)
            if len(order) < batch_size:
                fresh = list(range(len(batch)))
                rng.shuffle(fresh)
                order += fresh
            rows, order = order[:batch_size], order[batch_size:]
            loss = sft_update(model, optimizer, batch.slice(torch.tensor(rows)))
            progress.update(bar, advance=1, description=f"tool SFT loss {loss:.3f}")
            if stop_when is not None and check_due(step, check_every, first_check):
                model.eval()
                stop = stop_when(model, tokenizer)
                if stop and isinstance(stop_when, SuccessBand) and stop_when.overshot:
                    optimizer.state.clear()  # the line search trains nothing: Adam's moments (2x the weights) go
                    stop_when.settle(model, tokenizer)
                model.train()
                if stop:
                    if console is not None:
                        console.log(f"tool SFT stopped at step {step} (target reached)")
                    break
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if isinstance(stop_when, SuccessBand):  # every check, the line search's too: where the warm start ended
        (out / "warm_start_checks.json").write_text(json.dumps(stop_when.history))
    return out


def common_draws(measure: Callable[[Any, Any], Any], seed: int) -> Callable[[Any, Any], Any]:
    """``measure`` drawing the same random numbers at every call (common random numbers): two checks differ by
    their weights, not by their draws; a check's result does not depend on how many ran before it, and it takes
    nothing from the generator training and RL sample from."""

    def measured(model, tokenizer):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return measure(model, tokenizer)

    return measured


def counted_success(rate: float, calls: float, expert_calls: float, ratio: float, log=print) -> float:
    """A check's success as the band reads it: 0 where the sampled conversations call tools more than ``ratio``
    times as often as the expert's. Half-way through learning the format a small model calls the tools turn
    after turn without answering (SmolLM2 at its third step: 2.3-2.4 calls per conversation against the expert's
    1.5, 4 of 4 turns greedy); a lucky sample can still score 9 %, but RL from there sees almost no success and
    every episode runs to the agent's turn limit (docs/agent_main_job.md). Counted as under the band, the
    warm start trains on, or the line search moves towards the next check."""
    if calls <= ratio * expert_calls:
        return rate
    log(f"  {calls:.2f} calls per conversation is over {ratio:g} x the expert's {expert_calls:.2f}: counted as 0 %")
    return 0.0


def sft_conversations(cfg, task, scorer, start: str, settings: ConversationSettings, console) -> Path:
    """``prepare_tiny``'s warm start for conversation tasks: tool SFT on expert traces (``sft_demo_episodes``
    of them), stopping once sampled success on 32 training rows reaches ``sft_target_accuracy`` (if set;
    checked every ``sft_check_every`` steps, 50 by default: a check plays 32 conversations)."""
    train = cfg.train
    stop_when = None
    if train.sft_target_accuracy:
        params = SamplingParams.for_rollout(cfg, batch_size=ENV_CHECK_EPISODES)
        measure = common_draws(
            check_accuracy(task, scorer, task.train_rows[:ENV_CHECK_EPISODES], params, settings), train.seed
        )

        expert_calls: list[float] = []  # the expert conversations' tool calls per conversation, played once

        def success(model, tokenizer) -> float:
            result = measure(model, tokenizer)
            rate, calls = result["success_rate"], result.get("tools/calls_per_episode", 0.0)
            console.log(
                f"tool SFT check: sampled success {rate:.0%} on {ENV_CHECK_EPISODES} training rows, "
                f"{calls:.2f} tool calls per conversation"
            )
            if train.sft_max_calls_ratio is None:
                return rate
            if not expert_calls:
                expert = expert_traces(task, tokenizer, settings, train.sft_demo_episodes)
                expert_calls.append(tool_metrics(expert)["tools/calls_per_episode"])
            return counted_success(rate, calls, expert_calls[0], train.sft_max_calls_ratio, console.log)

        stop_when = SuccessBand(success, train.sft_target_accuracy, train.sft_target_max, log=console.log)
    console.log(
        f"tool SFT warm start: {train.sft_demo_episodes} expert conversations, up to {train.sft_steps} "
        "steps"
        + (f", stopping at {train.sft_target_accuracy:.0%} sampled success" if stop_when is not None else "")
        + (f" (at most {train.sft_target_max:.0%}: line search)" if stop_when and train.sft_target_max else "")
    )
    return tool_sft(
        start,
        task,
        settings,
        Path(train.output_dir) / "sft_model",
        train.sft_steps,
        train.sft_learning_rate,
        train.sft_batch_size,
        train.seed,
        train.sft_demo_episodes,
        stop_when,
        check_every=train.sft_check_every or 50,
        console=console,
        first_check=train.sft_first_check,
    )
