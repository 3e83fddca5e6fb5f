"""``grouprl agent check file.py:run``: play a few episodes of an agent through the endpoint and say, per call,
whether it merged, split or forked and why (``rollout/agent/drift.py``), in seconds on a laptop.

The default model is a tiny untrained one with grouprl's tool template, built in a temporary folder: enough to
see what the framework sends and whether its history stays append-only. ``--model DIR`` checks the model you
will train, whose own chat template decides the rest (a template that drops earlier ``<think>`` blocks splits
every call after the first).
"""

from __future__ import annotations

import argparse
import string
import tempfile
from pathlib import Path

from grouprl.run_config import build_config


def add_agent_parser(sub) -> None:
    agent = sub.add_parser("agent", help="tools for an agent you wrote (grouprl agent check)")
    commands = agent.add_subparsers(dest="agent_command", required=True)
    check = commands.add_parser("check", help="play a few episodes and say, per call, merged / split / forked and why")
    check.add_argument("agent", help="path/to/agent.py:run or package.module:run")
    check.add_argument("--model", default=None, help="model dir or hub id (default: a tiny untrained model)")
    check.add_argument(
        "--task", default="tool_arithmetic", help="the task whose rows the agent plays (default: tool_arithmetic)"
    )
    check.add_argument("--config", default=None, help="a recipe for the task, tools and rollout settings")
    check.add_argument("--episodes", type=int, default=2, help="episodes to play (default: 2)")
    check.add_argument("--max_new_tokens", type=int, default=64, help="tokens per call (default: 64)")
    check.add_argument("--device", default="cpu", help="auto, cpu, cuda or mps (default: cpu)")
    check.set_defaults(func=cmd_agent_check)


def tiny_chat_model(folder: Path) -> Path:
    """An untrained tiny model that reads any printable text, with grouprl's tool template: what an agent's
    frameworks send renders in it (one token a character, so a 16k-position context)."""
    from transformers import AutoTokenizer

    from grouprl.models.tiny import init_tiny
    from grouprl.tools.chat_template import TOOL_CHAT_TEMPLATE

    out = init_tiny(string.printable, folder / "tiny", hidden=32, layers=1, heads=2, seed=0, max_positions=16384)
    tokenizer = AutoTokenizer.from_pretrained(out)
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    return out


def cmd_agent_check(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="grouprl-agent-check-") as scratch:
        model = args.model or str(tiny_chat_model(Path(scratch)))
        return _check(args, model, tiny=args.model is None)


def _check(args: argparse.Namespace, model: str, tiny: bool) -> int:
    from grouprl.job.run import checked_task
    from grouprl.models.loading import load_policy, pick_device
    from grouprl.rollout.agent.drift import explain_calls, report_lines
    from grouprl.rollout.agent.runner import run_agent_episodes
    from grouprl.rollout.generation import SamplingParams, make_backend
    from grouprl.rollout.runner import episode_settings

    cli = {"model_name_or_path": model, "task": args.task, "agent": args.agent}
    if tiny:
        cli["max_conversation_tokens"] = 12000  # one token a character: the frameworks' prompts are long
    cfg = build_config(args.config, cli)
    task = checked_task(cfg)
    policy = load_policy(cfg.model, model, pick_device(args.device), need_reference=False)
    settings = episode_settings(cfg, task)
    seen: list[tuple[str, list]] = []
    settings.inspect = lambda episode_id, calls: seen.append((episode_id, calls))  # type: ignore[union-attr]
    rows = (task.eval_rows or task.train_rows)[: args.episodes]
    episodes = run_agent_episodes(
        [task.env_factory(row) for row in rows],
        rows,
        1,
        make_backend(policy, cfg),
        policy.tokenizer,
        SamplingParams(max_new_tokens=args.max_new_tokens),
        settings,  # type: ignore[arg-type]
        [task.seed_of(row) for row in rows],
    )
    for (episode_id, calls), ep in zip(seen, episodes):
        for line in report_lines(episode_id, explain_calls(policy.tokenizer, calls)):
            print(line)
        if ep.agent is not None and ep.agent.failure:
            print(f"  failed: {ep.agent.failure}: {ep.agent.message}")
        if ep.agent is not None and ep.agent.refused:
            print("  refused: " + ", ".join(f"{k} x{v}" for k, v in sorted(ep.agent.refused.items())))
    return 1 if all(ep.agent is not None and ep.agent.failure for ep in episodes) else 0
