"""Scoring the samples and showing the scores: one row a sample, a table, the errors, the means, a JSONL.

Scoring is the training scorer's (``rewards/scorer.py``): the same failure rule (an exception is recorded for
that sample only) and error format. Plain built-ins are called as ``fn(completion, ground_truth,
**other_fields)``; typed ``@reward_function``s get the messages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grouprl.reward_preview.samples import load_samples, sample_episode
from grouprl.rewards import registry
from grouprl.user_code import short_name


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
    weighted = weights is not None
    rows = score_rows(load_samples(samples_path, max_samples), scorer, weighted)
    console.print(score_table(rows, scorer.keys, samples_path, weighted))
    n_errors = print_errors_and_means(rows, scorer.keys, console)
    if out_path is not None:
        write_rows(rows, Path(out_path), console)
    return rows, n_errors


def score_rows(entries: list[dict[str, Any]], scorer, weighted: bool) -> list[dict[str, Any]]:
    """One row per entry of the samples file: each reward's score, reason, metrics (typed rewards) and errors;
    a malformed line's row holds its error and no scores. ``weighted``: a ``total`` too."""
    keys, fns = scorer.keys, scorer.fns
    episodes = [sample_episode(e) for e in entries if "error" not in e]
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
            if weighted:
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
            if weighted:
                row["total"] = scores.verdicts[good_i].score if scores is not None else 0.0
            good_i += 1
        rows.append(row)
    return rows


def _shorten(text: str, n: int = 60) -> str:
    flat = " ⏎ ".join(line.strip() for line in str(text).strip().splitlines() if line.strip())
    if len(flat) <= n:
        return flat
    head = n // 3  # the end of a completion (its answer) matters most
    return f"{flat[:head]} … {flat[-(n - head - 3) :]}"


def score_table(rows: list[dict[str, Any]], keys: list[str], samples_path: str | Path, weighted: bool):
    """The rows as a table: the completion shortened, a column per reward (``error`` where it failed)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"reward preview: {samples_path}")
    table.add_column("#", justify="right")
    table.add_column("completion", overflow="fold")
    for key in keys:
        table.add_column(short_name(key), justify="right")
    if weighted:
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
        if weighted:
            cells.append(Text(f"{row['total']:.3f}"))
        table.add_row(*cells)
    return table


def print_errors_and_means(rows: list[dict[str, Any]], keys: list[str], console) -> int:
    """Every error of every sample, then one line of means; returns how many samples had an error."""
    from rich.text import Text

    n_errors = sum(bool(r["errors"]) for r in rows)
    for row in rows:
        for err in row["errors"]:
            console.print(Text(f"sample {row['index']} (line {row['line']}): {err}", style="red"), soft_wrap=True)
    means = []
    for key in keys:
        vals = [r["scores"][key] for r in rows if r["scores"].get(key) is not None]
        means.append(f"{key}={sum(vals) / len(vals):.3f}" if vals else f"{key}=n/a")
    console.print(f"{len(rows)} sample(s), {n_errors} with errors; mean: {', '.join(means)}", soft_wrap=True)
    return n_errors


def write_rows(rows: list[dict[str, Any]], out: Path, console) -> None:
    """The rows as JSONL (without the completion, which the samples file holds)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for row in rows:
            record = {k: v for k, v in row.items() if k != "completion"}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    console.print(f"wrote {out}", soft_wrap=True)
