"""Raw slate rows -> task rows (prompt, gold index, opinion label), from the hub or a local copy.

Sources: a hub id (``od2961/grail-gun``: ``datasets.load_dataset(id, split=...)``; real code,
but no test can reach the hub here), a local dir holding ``<split>.jsonl`` (or ``.json`` /
``.parquet``), or one JSONL file (then it is the training split and the validation split
must come from elsewhere).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from grouprl.data.sources import check_utf8
from grouprl.tasks.slates import schema
from grouprl.tasks.slates.prompt import build_prompt, viewer_summary

log = logging.getLogger(__name__)
HUB_IDS = {"gun_control": "od2961/grail-gun", "minimum_wage": "od2961/grail-wage"}


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    check_utf8(path)
    rows = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(
                        f"{path}:{lineno}: not valid JSON ({err.msg}); expected one row per line"
                    ) from None
    return rows


def load_raw_split(source: str, split: str) -> list[dict[str, Any]]:
    """The raw rows of ``split`` from a local dir/file or a hub dataset id."""
    local = Path(source)
    if local.is_file():
        return _read_jsonl(local)
    if local.is_dir():
        for suffix in (".jsonl", ".json"):
            if (local / f"{split}{suffix}").is_file():
                return _read_jsonl(local / f"{split}{suffix}")
        if (local / f"{split}.parquet").is_file():
            from datasets import load_dataset

            return list(load_dataset("parquet", data_files=str(local / f"{split}.parquet"), split="train"))
        raise FileNotFoundError(f"slate data: {local} has no {split}.jsonl, {split}.json or {split}.parquet")
    if source.startswith((".", "/")) or source.count("/") != 1:
        raise FileNotFoundError(f"slate data: no such file or dir '{source}' (and it is not a hub id 'owner/name')")
    from datasets import load_dataset  # the hub: not reachable from the tests (no network here)

    return list(load_dataset(source, split=split))


def gold_completion(index: int, opinion: str | None) -> str:
    """The reference answer used for the SFT warm start (short think, the contract's tags)."""
    return f"<think>option {index}</think><answer>{index}</answer><opinion>{opinion or 'no_change'}</opinion>"


def to_task_row(
    raw: dict[str, Any],
    where: str,
    solution_key: str = "next_video_id",
    max_history: int = 12,
    show_ids: bool = False,
    counts: schema.DropCounts | None = None,
) -> dict[str, Any] | None:
    """One training row, or None (counted in ``counts``) when the slate is empty or the gold is not in it."""
    counts = counts if counts is not None else schema.DropCounts()
    items = schema.slate_items(raw, where)
    if not items:
        counts.drop("empty_slate", where)
        return None
    gold = schema.gold_id(raw, solution_key, where)
    index = schema.gold_index(items, gold, raw.get("next_video_title"))
    if index is None:
        counts.drop(
            "no_gold" if gold is None and schema.is_missing(raw.get("next_video_title")) else "gold_not_in_slate", where
        )
        return None
    counts.kept += 1
    issue = schema.issue_of(raw)
    opinion = schema.opinion_label(raw, issue)
    gold_item = items[index - 1]
    return {
        "question": build_prompt(raw, issue, items, max_history, show_ids),
        "ground_truth": str(index),
        "gold_index": index,
        "gold_id": schema.text(gold_item.get("id")) or gold,
        "n_options": len(items),  # the parsed slate is the authority (a stale n_options column is ignored)
        "opinion_label": opinion,
        "issue": issue.key if issue else None,
        "viewer": viewer_summary(raw),
        "slate_items": [{k: it.get(k) for k in ("id", "title", "channel_title")} for it in items],
        "gold_completion": gold_completion(index, opinion),
        "source_row": where,
    }


def prepare_rows(
    raws: list[dict[str, Any]],
    where: str,
    solution_key: str = "next_video_id",
    max_history: int = 12,
    show_ids: bool = False,
) -> tuple[list[dict[str, Any]], schema.DropCounts]:
    counts = schema.DropCounts()
    rows = [
        r
        for i, raw in enumerate(raws)
        if (r := to_task_row(raw, f"{where} row {i}", solution_key, max_history, show_ids, counts)) is not None
    ]
    message = f"slate data {where}: {counts.summary()}"
    if counts.dropped:
        message += "; first of each: " + ", ".join(f"{k}: {v}" for k, v in counts.examples.items())
        log.warning(message)
    else:
        log.info(message)
    if raws and not rows:
        raise ValueError(
            f"slate data {where}: every row was dropped ({counts.summary()}); expected slates that "
            "contain the clicked video"
        )
    return rows, counts


def load_rows(
    source: str, split: str, solution_key: str = "next_video_id", max_history: int = 12, show_ids: bool = False
) -> tuple[list[dict[str, Any]], schema.DropCounts]:
    return prepare_rows(load_raw_split(source, split), f"{source}:{split}", solution_key, max_history, show_ids)
