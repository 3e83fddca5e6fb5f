"""From dataset rows to task rows: the prompt as chat messages, the ground truth, every other column.

A task row is the dataset row itself (every column, as TRL passes them to reward functions)
plus ``ground_truth`` (the solution column's value, for grouprl's typed rewards). The prompt
column is either a string (the user message, with ``system_prompt`` before it) or a list of
chat messages used as they are (a system prompt is then added only when the list has none).

Rows whose prompt is missing or empty, or whose solution is missing or unusable, are bad: they
are dropped, counted and reported with their row numbers; past ``max_bad_row_fraction`` of a
split the load stops with an error naming them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

log = logging.getLogger(__name__)

GROUND_TRUTH = "ground_truth"
ROLES = ("system", "user", "assistant", "tool")


class BadRowsError(ValueError):
    """More of a split's rows are bad than the run allows."""


@dataclass
class PromptSpec:
    prompt_column: str = "prompt"
    solution_column: str | None = None  # None: no ground truth (rewards read other columns)
    system_prompt: str | None = None
    max_bad_row_fraction: float = 0.05
    # Optional check of a solution value: a reason it is unusable, or None (e.g. math_accuracy's gold parse).
    check_solution: Callable[[Any], str | None] | None = None


@dataclass
class PromptRows:
    rows: list[dict[str, Any]]
    bad: list[tuple[int, str]] = field(default_factory=list)  # (row number in the split, why)
    columns: list[str] = field(default_factory=list)  # the dataset's columns (what rewards receive)


def prompt_messages(value: Any, system_prompt: str | None) -> list[dict[str, str]]:
    """The chat for a prompt value, or ValueError saying what is wrong with it."""
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("prompt is an empty string")
        system = [{"role": "system", "content": system_prompt}] if system_prompt else []
        return system + [{"role": "user", "content": value}]
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError("prompt is an empty list of messages")
        messages = []
        for i, m in enumerate(value):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise ValueError(f"prompt message {i} is {str(m)[:60]!r}; expected {{'role': ..., 'content': ...}}")
            if m["role"] not in ROLES:
                raise ValueError(f"prompt message {i} has role {m['role']!r}; expected one of {ROLES}")
            if not isinstance(m["content"], str):
                raise ValueError(f"prompt message {i} content is {type(m['content']).__name__}; expected a string")
            messages.append({"role": m["role"], "content": m["content"]})
        if not any(m["content"].strip() for m in messages if m["role"] == "user"):
            raise ValueError("prompt has no user message with text")
        if system_prompt and messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": system_prompt})
        return messages
    if value is None:
        raise ValueError("prompt is missing (null)")
    raise ValueError(f"prompt is a {type(value).__name__}; expected a string or a list of chat messages")


def _solution_problem(value: Any, check: Callable[[Any], str | None] | None) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return "solution is missing or empty"
    return check(value) if check else None


def to_prompt_rows(dataset, spec: PromptSpec, where: str) -> PromptRows:
    """Task rows from a ``datasets.Dataset`` (or any list of dicts); ``where`` names it in messages."""
    columns = list(getattr(dataset, "column_names", None) or (list(dataset[0]) if len(dataset) else []))
    if spec.prompt_column not in columns:
        raise ValueError(
            f"{where}: no prompt column {spec.prompt_column!r} (dataset_prompt_column); "
            f"the dataset has columns {columns}"
        )
    if spec.solution_column and spec.solution_column not in columns:
        raise ValueError(
            f"{where}: no solution column {spec.solution_column!r} (dataset_solution_column); "
            f"the dataset has columns {columns}"
        )
    rows, bad = [], []
    for index, raw in enumerate(dataset):
        try:
            prompt_messages(raw.get(spec.prompt_column), spec.system_prompt)
        except ValueError as err:
            bad.append((index, f"column {spec.prompt_column!r}: {err}"))
            continue
        row = dict(raw)
        if spec.solution_column:
            problem = _solution_problem(raw.get(spec.solution_column), spec.check_solution)
            if problem:
                bad.append(
                    (
                        index,
                        f"column {spec.solution_column!r}: {problem} "
                        f"(value {str(raw.get(spec.solution_column))[:40]!r})",
                    )
                )
                continue
            row[GROUND_TRUTH] = raw[spec.solution_column]
        rows.append(row)
    report_bad_rows(where, bad, len(rows) + len(bad), spec.max_bad_row_fraction)
    log.debug("%s: %d rows kept, %d dropped as bad; columns %s", where, len(rows), len(bad), columns)
    return PromptRows(rows, bad, columns)


def report_bad_rows(where: str, bad: list[tuple[int, str]], total: int, max_fraction: float) -> None:
    """Warn with the row numbers; stop (BadRowsError) past ``max_fraction`` of ``total``."""
    if not bad:
        return
    shown = "; ".join(f"row {i}: {why}" for i, why in bad[:10]) + (
        f"; ... {len(bad) - 10} more" if len(bad) > 10 else ""
    )
    fraction = len(bad) / max(total, 1)
    if fraction > max_fraction:
        raise BadRowsError(
            f"{where}: {len(bad)} of {total} rows are bad ({fraction:.1%} > max_bad_row_fraction="
            f"{max_fraction}): {shown}"
        )
    log.warning("%s: dropped %d of %d bad rows: %s", where, len(bad), total, shown)
