"""``grouprl rewards list`` and ``grouprl rewards preview``: the sub-commands, their parser, the reward list,
and the scorer a training recipe would build (``--config``)."""

from __future__ import annotations

import argparse
import inspect
import sys
from typing import Callable

from grouprl.reward_preview.samples import EXPECTED_FORMS
from grouprl.reward_preview.score_table import preview
from grouprl.rewards import registry


def _first_doc_line(fn: Callable) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def list_rewards(console=None) -> list[tuple[str, str, str, str]]:
    """Print (and return) every reward a recipe can name: the registry's functions (kind plain/typed, mode,
    first docstring line), then the model and learned rewards (``rewards/learned/model_rewards.py``)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    entries = []
    for name, fn in sorted(registry.REWARDS.items()):
        typed = registry.is_typed(fn)
        entries.append((name, "typed" if typed else "plain", fn.reward_mode if typed else "-", _first_doc_line(fn)))
    from grouprl.rewards.learned.model_rewards import MODEL_REWARDS

    entries += [(name, kind, "-", what) for name, (kind, what) in MODEL_REWARDS.items()]
    table = Table(title="grouprl rewards (also: path/to/file.py:function, package.module:function)")
    for col in ("name", "kind", "mode", "description"):
        table.add_column(col, overflow="fold")
    for entry in entries:
        table.add_row(*entry)
    console.print(table)
    return entries


def cmd_rewards_list(args: argparse.Namespace) -> int:
    list_rewards()
    return 0


def cmd_rewards_preview(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console()
    try:
        scorer = run_scorer(args.config) if args.config else None
        if scorer is None and not args.reward:
            raise ValueError("give --reward (repeatable) or --config RECIPE")
        _, n_errors = preview(
            args.reward,
            args.samples,
            max_samples=args.max_samples,
            out_path=args.out,
            weights=args.weight,
            console=console,
            sandbox_user_rewards=args.sandbox_user_rewards,
            reward_timeout=args.reward_timeout,
            scorer=scorer,
        )
    except KeyError as err:  # an unknown reward or a bad path/module
        print(f"grouprl: error: {err.args[0] if err.args else err}", file=sys.stderr)
        return 2
    except ValueError as err:
        print(f"grouprl: error: {err}", file=sys.stderr)
        return 2
    if n_errors:
        print(f"grouprl: {n_errors} sample(s) had errors (shown above)", file=sys.stderr)
        return 1
    return 0


def run_scorer(recipe: str):
    """The scorer a training run of ``recipe`` would build (its rewards, options, weights after
    normalisation, sandbox rule and time budget), without its learned rewards. A recipe that names
    its rewards is not loaded any further; one that relies on its task's default rewards loads the task."""
    from types import SimpleNamespace

    from grouprl.run_config import build_config
    from grouprl.rewards.scorer import Scorer
    from grouprl.tasks import load_task
    from grouprl.tasks.registry import with_rewards

    cfg = build_config(recipe, {})
    if cfg.task.rewards:
        task = with_rewards(
            cfg,
            SimpleNamespace(reward_names=[], reward_kwargs={}, reward_weights=[], correct_reward=None, predict=None),
        )
    else:
        task = load_task(cfg)
    return Scorer.from_config(cfg, task, learned=[])


def add_rewards_parser(sub) -> argparse.ArgumentParser:
    """Register ``rewards list`` and ``rewards preview`` on a subparsers object."""
    rw = sub.add_parser("rewards", help="list reward functions or preview them on samples")
    rsub = rw.add_subparsers(dest="rewards_command", required=True)

    ls = rsub.add_parser("list", help="the built-in reward functions")
    ls.set_defaults(func=cmd_rewards_list)
    _add_preview_parser(rsub)
    return rw


def _add_preview_parser(rsub) -> None:
    pv = rsub.add_parser(
        "preview",
        help="score a JSONL of samples with reward functions (no model needed)",
        description="Score samples with reward functions and print a table. Each line: "
        + EXPECTED_FORMS
        + ". Exit code 1 when any sample errors.",
    )
    pv.add_argument(
        "--reward",
        action="append",
        metavar="NAME_OR_PATH",
        help="built-in name, path/to/file.py:function or package.module:function (repeatable)",
    )
    pv.add_argument(
        "--config",
        default=None,
        metavar="RECIPE",
        help="score with the rewards of this training recipe, as training does: their options, "
        "normalised weights (the 'total' column), sandbox rule and reward_timeout "
        "(instead of --reward/--weight)",
    )
    pv.add_argument("--samples", required=True, metavar="FILE.jsonl", help="samples JSONL (required)")
    pv.add_argument(
        "--sandbox_user_rewards",
        "--sandbox-user-rewards",
        dest="sandbox_user_rewards",
        action="store_true",
        help="run path/to/file.py:function rewards in the sandbox, as training "
        "does with sandbox_user_rewards: true; refuse anything else that "
        "would be imported (default: off)",
    )
    pv.add_argument(
        "--reward_timeout",
        "--reward-timeout",
        dest="reward_timeout",
        type=float,
        default=60.0,
        help="seconds one reward call may take; then its samples are errors (default: 60)",
    )
    pv.add_argument(
        "--max-samples", dest="max_samples", type=int, default=None, help="score only the first N lines (default: all)"
    )
    pv.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="per-sample JSONL: index, scores, reasons, metrics, errors (default: none)",
    )
    pv.add_argument(
        "--weight",
        action="append",
        type=float,
        default=None,
        help="weight of each --reward, in order, for a weighted 'total' column (default: none)",
    )
    pv.set_defaults(func=cmd_rewards_preview)
