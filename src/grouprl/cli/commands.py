"""What each ``grouprl`` command runs (the parser that reaches them: ``cli/parser.py``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from grouprl.cli.config_flags import built_in_job, config_from_args
from grouprl.config import ConfigError
from grouprl.run_config import build_config


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
    # a tool model's format; the system message of every prompt; the agent that plays each episode (it implies
    # episode_mode: conversation, config/sections.py)
    for flag in ("tool_parser", "system_prompt", "agent"):
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
    check_agent_ran(result, out)
    return 0


def check_agent_ran(result: dict, out: str) -> None:
    """An evaluation in which every agent episode failed measured nothing: exit 1 naming where to look (the
    first failure of each kind was printed with its traceback; each episode's record has its failure)."""
    if result.get("agent/failed_episodes", 0.0) < 1.0:
        return
    from grouprl.job.agent_failures import AgentCannotRun

    kinds = ", ".join(
        f"{k.rsplit('/', 1)[1]} x{int(v)}" for k, v in sorted(result.items()) if k.startswith("agent/failed/") and v
    )
    raise AgentCannotRun(f"every agent episode of the evaluation failed ({kinds}); see the warnings above and {out}")


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


def cmd_list(args: argparse.Namespace) -> int:
    """One line per plug-in table (registry.py): its kind, the config key that names it, its names."""
    from grouprl.run_config import plugin_registries

    for table in plugin_registries():
        key = f" ({table.config_key})" if table.config_key else ""
        code = f"; or path/to/file.py:{table.code_form}, package.module:{table.code_form}" if table.takes_code else ""
        print(f"{table.kind}{key}: {', '.join(sorted(table))}{code}")
    return 0
