"""The ``grouprl`` parser: one helper a command, each adding its sub-parser and the function it runs."""

from __future__ import annotations

import argparse

from grouprl.cli.commands import (
    cmd_dashboard,
    cmd_eval,
    cmd_init_model,
    cmd_list,
    cmd_plot,
    cmd_report,
    cmd_train,
    cmd_view,
)
from grouprl.cli.config_flags import add_config_flags, config_fields_help
from grouprl.config import ENV_VARS
from grouprl.tasks.registry import TASKS

FORMATTER = argparse.RawDescriptionHelpFormatter


def build_parser() -> argparse.ArgumentParser:
    import grouprl.tasks  # noqa: F401 - registers the tasks (and their config sections) before flags are made

    parser = argparse.ArgumentParser(
        prog="grouprl",
        formatter_class=FORMATTER,
        description="Group-relative RL post-training (GRPO, Dr. GRPO, RLOO, GiGPO) for language models.\n\n"
        "`grouprl train` with no options runs the main job: SmolLM2-135M-Instruct (materialised once\n"
        "from its package) on 2-digit additions asked in words: evaluate, run GRPO, evaluate again.\n"
        "`grouprl train --model tiny` builds a tiny Qwen2 model instead and warms it with SFT (offline).",
        epilog=config_fields_help(),
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (add_train, add_eval, add_plot, add_view, add_dashboard, add_report, add_init_model, add_list):
        add(sub)
    from grouprl.generate.cli import add_generate_parser
    from grouprl.reward_preview import add_rewards_parser

    add_rewards_parser(sub)
    add_generate_parser(sub)
    from grouprl.tasks.slates.cli import add_grail_data_parser

    add_grail_data_parser(sub)
    from grouprl.rollout.backends.vllm_server import add_vllm_serve_parser

    add_vllm_serve_parser(sub)
    from grouprl.cli.agent_check import add_agent_parser

    add_agent_parser(sub)
    return parser


def add_train(sub) -> None:
    train = sub.add_parser(
        "train",
        help="train with RL (defaults < --config < env vars < flags)",
        formatter_class=FORMATTER,
        description="Train with the configured estimator (default GRPO). Precedence: defaults < --config YAML < environment "
        f"({', '.join(ENV_VARS)}, GROUPRL_<FIELD>) < flags.",
    )
    from grouprl.config.main_job import MAIN_JOBS, MAIN_MODEL

    train.add_argument(
        "--model",
        default=None,
        choices=sorted(MAIN_JOBS),
        help=f"the built-in job to run: {MAIN_MODEL} (a real instruct model from its package; the "
        "default when no --config, --model_name_or_path or --task is given) or tiny (the "
        "0.8 M-parameter model grouprl builds itself, offline; the field defaults below)",
    )
    add_config_flags(train)
    train.set_defaults(func=cmd_train)


def add_eval(sub) -> None:
    ev = sub.add_parser("eval", help="accuracy of a model on a task's held-out split")
    ev.add_argument("--model", required=True, help="model dir or hub id (required)")
    ev.add_argument(
        "--task",
        default=None,
        choices=sorted(TASKS),
        help="task (default: the --config recipe's, else gsm8k); environments report the success rate",
    )
    ev.add_argument("--config", default=None, help="recipe whose task/rollout options to use (default: None)")
    ev.add_argument("--dataset_name_or_path", default=None, help="gsm8k dir or hub id (default: openai/gsm8k)")
    ev.add_argument("--n", type=int, default=200, help="examples to evaluate (default: 200)")
    ev.add_argument(
        "--max_new_tokens",
        type=int,
        default=None,
        help="completion cap per step (default: the task's, e.g. gsm8k 512, gridworld 24)",
    )
    ev.add_argument("--sample", action="store_true", help="sample instead of greedy decoding (default: False)")
    ev.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: 1.0)")
    ev.add_argument("--batch_size", type=int, default=64, help="sequences per generate call (default: 64)")
    ev.add_argument("--device", default="auto", help="auto, cpu, cuda or mps (default: auto)")
    ev.add_argument(
        "--out",
        default=None,
        help="per-example JSONL (default: MODEL/eval_TASK.jsonl); a tool "
        "conversation is kept whole (every turn and tool result)",
    )
    ev.add_argument(
        "--tool_parser",
        default=None,
        help="tool-call format of a conversation task: hermes, mistral, llama3_json (default: the "
        "recipe's, else hermes)",
    )
    ev.add_argument("--system_prompt", default=None, help="system message of every prompt (default: the task's)")
    ev.add_argument(
        "--agent",
        default=None,
        help="an agent you wrote, path/to/agent.py:run or package.module:run: it plays every episode through "
        "the OpenAI-compatible endpoint, as in grouprl train --agent (implies episode_mode: conversation; "
        "default: the recipe's, else none)",
    )
    ev.set_defaults(func=cmd_eval)


def add_plot(sub) -> None:
    pl = sub.add_parser("plot", help="reward curve and one prompt's accuracy from rollouts.jsonl")
    pl.add_argument("rollouts", help="path to rollouts/rollouts.jsonl")
    pl.add_argument("--out", default="reward_curve.png", help="PNG to write (default: reward_curve.png)")
    pl.add_argument("--prompt_id", default=None, help="prompt to follow (default: the most repeated one)")
    pl.set_defaults(func=cmd_plot)


def add_view(sub) -> None:
    vw = sub.add_parser("view", help="print trajectories (every step of every episode) as tables")
    vw.add_argument("kind", choices=["trajectories"], help="what to view")
    vw.add_argument("file", help="a trajectories/step_N.jsonl file of a run")
    vw.add_argument("--episode", default=None, help="episode id (e.g. g0-e3) to show step by step (default: list)")
    vw.set_defaults(func=cmd_view)


def add_dashboard(sub) -> None:
    db = sub.add_parser("dashboard", help="a live web app over run folders (curves, groups, trajectories, GRAIL)")
    db.add_argument("output_dirs", nargs="+", metavar="OUTPUT_DIR", help="run folders (output_dir of grouprl train)")
    db.add_argument("--port", type=int, default=8765, help="port (default: 8765; 0 = any free port)")
    db.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    db.set_defaults(func=cmd_dashboard)


def add_report(sub) -> None:
    rp = sub.add_parser("report", help="one self-contained HTML file of run folders (works offline)")
    rp.add_argument("output_dirs", nargs="+", metavar="OUTPUT_DIR", help="run folders (output_dir of grouprl train)")
    rp.add_argument("--out", default="report.html", help="HTML file to write (default: report.html)")
    rp.add_argument(
        "--max_mb",
        type=float,
        default=24.0,
        help="rollout + trajectory records embedded per run, in MiB; whole steps spread over the run (default: 24)",
    )
    rp.set_defaults(func=cmd_report)


def add_init_model(sub) -> None:
    im = sub.add_parser(
        "init-model",
        help="build a tiny Qwen2 model + tokenizer from a task's corpus, or "
        "write a real pretrained model from a package (--from)",
    )
    im.add_argument(
        "--from",
        dest="from_pretrained",
        default=None,
        metavar="NAME",
        help="a real model shipped as a GGUF inside a package, dequantised into a model folder: "
        "smollm2-135m-instruct, qwen2.5-coder-0.5b-instruct, qwen2.5-coder-1.5b-instruct "
        "(default: None, build the tiny model)",
    )
    im.add_argument(
        "--task",
        default=None,
        choices=sorted(TASKS),
        help="task whose corpus defines the vocabulary (default: the recipe's, else arithmetic)",
    )
    im.add_argument(
        "--config",
        default=None,
        help="recipe whose task and dataset define the vocabulary, e.g. a prompt_dataset recipe (default: None)",
    )
    im.add_argument("--dataset_name_or_path", default=None, help="dataset dir, file or hub id (default: the task's)")
    im.add_argument(
        "--out",
        default=None,
        help="output dir (default: tiny_model; with --from, $GROUPRL_CACHE/models/NAME or "
        "~/.cache/grouprl/models/NAME)",
    )
    im.add_argument("--hidden_size", type=int, default=128, help="hidden size (default: 128)")
    im.add_argument("--num_layers", type=int, default=4, help="decoder layers (default: 4)")
    im.add_argument("--num_heads", type=int, default=4, help="attention heads (default: 4)")
    im.add_argument("--seed", type=int, default=0, help="init seed (default: 0)")
    im.set_defaults(func=cmd_init_model)


def add_list(sub) -> None:
    ls = sub.add_parser(
        "list",
        help="the built-in names of every plug-in (estimators, losses, tasks, rewards, "
        "tools, backends, parsers, sampling corrections)",
    )
    ls.set_defaults(func=cmd_list)
