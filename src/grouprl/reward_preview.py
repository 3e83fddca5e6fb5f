"""Preview reward functions on a JSONL of samples, without a model: ``grouprl rewards preview``.

Each line of the samples file is one of

* ``{"messages": [..., {"role": "assistant", "content": ...}], "ground_truth": ...}``
* ``{"prompt": str | messages, "completion": str, "answer": ...}`` (``answer`` may be a full
  GSM8K answer field: the gold number after ``####`` is taken)

plus any other fields, which are passed to every reward as keyword arguments. Plain built-ins
are called as ``fn(completion, ground_truth, **other_fields)``; typed ``@reward_function``s get
the messages. Scoring is the training scorer's (``rewards/scorer.py``): the same failure rule
(an exception is recorded for that sample only) and error format; a malformed line is
recorded as an error naming the line.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path
from typing import Any, Callable

from grouprl.records import Episode, Step
from grouprl.rewards import registry
from grouprl.rewards.builtin.gsm8k import extract_gold
from grouprl.rewards.kit import conversation
from grouprl.user_code import short_name

__all__ = [
    "preview",
    "list_rewards",
    "load_samples",
    "add_rewards_parser",
    "cmd_rewards_list",
    "cmd_rewards_preview",
    "SampleError",
]

EXPECTED_FORMS = (
    '{"messages": [...], "ground_truth": ...} or {"prompt": str|messages, "completion": str, "answer": ...}'
)
_SAMPLE_KEYS = {"messages", "ground_truth", "prompt", "completion", "answer"}


class SampleError(ValueError):
    """A line of the samples file that is not a sample."""


def _check_messages(messages: Any, lineno: int, what: str) -> None:
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise SampleError(
            f'line {lineno}: \'{what}\' must be a list of {{"role", "content"}} objects; expected {EXPECTED_FORMS}'
        )


def parse_sample(obj: Any, lineno: int) -> dict[str, Any]:
    """``{messages, completion, ground_truth, extra}`` of one JSONL object, or ``SampleError``."""
    if not isinstance(obj, dict):
        raise SampleError(f"line {lineno}: expected a JSON object, got {type(obj).__name__}; expected {EXPECTED_FORMS}")
    extra = {k: v for k, v in obj.items() if k not in _SAMPLE_KEYS}
    if "messages" in obj:
        messages = obj["messages"]
        _check_messages(messages, lineno, "messages")
        if not messages or messages[-1].get("role") != "assistant":
            raise SampleError(
                f"line {lineno}: the last message must be the assistant's completion "
                f"(role 'assistant'); expected {EXPECTED_FORMS}"
            )
        completion = messages[-1].get("content") or ""
        truth = obj.get("ground_truth", obj.get("answer"))
    elif "completion" in obj:
        completion, prompt = obj["completion"], obj.get("prompt", "")
        if not isinstance(completion, str):
            raise SampleError(
                f"line {lineno}: 'completion' must be a string, got {type(completion).__name__}; "
                f"expected {EXPECTED_FORMS}"
            )
        if isinstance(prompt, list):
            _check_messages(prompt, lineno, "prompt")
        elif not isinstance(prompt, str):
            raise SampleError(
                f"line {lineno}: 'prompt' must be a string or a list of messages; expected {EXPECTED_FORMS}"
            )
        messages = conversation(prompt, completion)
        if "prompt" in obj:
            extra["prompt"] = prompt
        truth = obj.get("answer", obj.get("ground_truth"))
        if isinstance(truth, str) and "####" in truth:
            truth = extract_gold(truth) or truth
    else:
        raise SampleError(
            f"line {lineno}: no 'messages' or 'completion' field (keys: {sorted(obj)}); expected {EXPECTED_FORMS}"
        )
    if isinstance(truth, (int, float)) and not isinstance(truth, bool):
        truth = str(truth)
    return {"messages": messages, "completion": completion, "ground_truth": truth, "extra": extra}


def load_samples(samples_path: str | Path, max_samples: int | None = None) -> list[dict[str, Any]]:
    """One entry per non-blank line (up to ``max_samples``): a parsed sample, or ``{"error": ...}``."""
    path = Path(samples_path)
    if not path.is_file():
        raise FileNotFoundError(f"samples file not found: {path}")
    out: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if max_samples is not None and len(out) >= max_samples:
                break
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                out.append(
                    {
                        "line": lineno,
                        "error": f"line {lineno}: invalid JSON ({err.msg} at column "
                        f"{err.colno}); expected {EXPECTED_FORMS}",
                    }
                )
                continue
            try:
                out.append({"line": lineno, **parse_sample(obj, lineno)})
            except SampleError as err:
                out.append({"line": lineno, "error": str(err)})
    return out


def sample_episode(sample: dict[str, Any]) -> Episode:
    """A parsed sample as the one-step episode the scorer sees (each sample its own episode)."""
    step = Step(
        prompt_text="",
        prompt_ids=[],
        action_text=sample["completion"],
        action_ids=[],
        truncated=False,
        anchor_state=None,
        messages=sample["messages"][:-1],
    )
    return Episode(
        group_id=0, index_in_group=0, row={**sample["extra"], "ground_truth": sample["ground_truth"]}, steps=[step]
    )


def _shorten(text: str, n: int = 60) -> str:
    flat = " ⏎ ".join(line.strip() for line in str(text).strip().splitlines() if line.strip())
    if len(flat) <= n:
        return flat
    head = n // 3  # the end of a completion (its answer) matters most
    return f"{flat[:head]} … {flat[-(n - head - 3) :]}"


def preview(
    reward_names: list[str],
    samples_path: str | Path,
    max_samples: int | None = None,
    out_path: str | Path | None = None,
    weights: list[float] | None = None,
    console=None,
    sandbox_user_rewards: bool = False,
    reward_timeout: float = 60.0,
    scorer=None,
) -> tuple[list[dict[str, Any]], int]:
    """Score every sample with every reward; print a table; write ``out_path`` JSONL if given.

    Returns ``(rows, n_errors)``: one row per sample (``index``, ``line``, ``scores``, ``reasons``,
    ``metrics``, ``errors``, and ``total`` = the weighted sum when ``weights`` are given) and the
    number of samples with at least one error (a malformed line counts as one).
    Raises ``KeyError`` for a reward that cannot be resolved and ``FileNotFoundError`` for a
    missing samples file.
    """
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    if scorer is not None:  # a run's scorer (--config): its rewards, options, weights, sandbox rule, budget
        reward_names, weights = list(scorer.keys), list(scorer.weights.values())
    if not reward_names:
        raise ValueError("give at least one reward")
    if weights is not None and len(weights) != len(reward_names):
        raise ValueError(f"{len(weights)} weight(s) for {len(reward_names)} reward(s)")
    from grouprl.rewards.scorer import Scorer

    # The training scorer, with the preview's weights as given, never stopping on errors (it shows them).
    scorer = scorer or Scorer(
        list(reward_names),
        list(weights) if weights is not None else [1.0] * len(reward_names),
        normalize_weights=False,
        sandbox_user_rewards=sandbox_user_rewards,
        reward_timeout=reward_timeout,
    )
    scorer.max_error_fraction = 1.0
    keys, fns = scorer.keys, scorer.fns
    entries = load_samples(samples_path, max_samples)
    good = [e for e in entries if "error" not in e]
    episodes = [sample_episode(e) for e in good]
    scores = scorer.score(episodes) if episodes else None
    per_reward = scores.parts if scores is not None else {key: [] for key in keys}

    rows: list[dict[str, Any]] = []
    good_i = 0
    for index, e in enumerate(entries):
        row: dict[str, Any] = {
            "index": index,
            "line": e["line"],
            "completion": e.get("completion"),
            "scores": {},
            "reasons": {},
            "metrics": {},
            "errors": [],
        }
        if "error" in e:
            row["errors"].append(e["error"])
            row["scores"] = {k: None for k in keys}
            row["reasons"] = {k: None for k in keys}
            if weights is not None:
                row["total"] = 0.0
        else:
            for key in keys:
                part = per_reward[key][good_i]
                row["scores"][key] = part.score
                row["reasons"][key] = part.reason
                if registry.is_typed(fns[key]):
                    row["metrics"][key] = part.metrics
                if part.error:
                    row["errors"].append(part.error)
            if weights is not None:
                row["total"] = scores.verdicts[good_i].score if scores is not None else 0.0
            good_i += 1
        rows.append(row)

    table = Table(title=f"reward preview: {samples_path}")
    table.add_column("#", justify="right")
    table.add_column("completion", overflow="fold")
    for key in keys:
        table.add_column(short_name(key), justify="right")
    if weights is not None:
        table.add_column("total", justify="right")
    for row in rows:
        cells: list[Any] = [str(row["index"])]
        if row["completion"] is None:
            cells.append(Text(f"line {row['line']}: malformed", style="red"))
        else:
            cells.append(Text(_shorten(row["completion"])))
        for key in keys:
            err = next((x for x in row["errors"] if x.startswith(f"{key}: ")), None)
            if err or row["completion"] is None:
                cells.append(Text("error", style="bold red"))
            else:
                score = row["scores"][key]
                cells.append(Text("—" if score is None else f"{score:.3f}"))
        if weights is not None:
            cells.append(Text(f"{row['total']:.3f}"))
        table.add_row(*cells)
    console.print(table)

    n_errors = sum(bool(r["errors"]) for r in rows)
    for row in rows:
        for err in row["errors"]:
            console.print(Text(f"sample {row['index']} (line {row['line']}): {err}", style="red"), soft_wrap=True)
    means = []
    for key in keys:
        vals = [r["scores"][key] for r in rows if r["scores"].get(key) is not None]
        means.append(f"{key}={sum(vals) / len(vals):.3f}" if vals else f"{key}=n/a")
    console.print(f"{len(rows)} sample(s), {n_errors} with errors; mean: {', '.join(means)}", soft_wrap=True)

    if out_path is not None:
        out = Path(out_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", encoding="utf-8") as f:
            for row in rows:
                record = {k: v for k, v in row.items() if k != "completion"}
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        console.print(f"wrote {out}", soft_wrap=True)
    return rows, n_errors


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


# --------------------------------------------------------------------------- CLI


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
    return rw
