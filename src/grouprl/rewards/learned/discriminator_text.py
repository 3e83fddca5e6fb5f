"""What the GAIL discriminator reads: (the chosen item, the context it was chosen in).

The original renders one string ``VIEWER / STATE (the whole prompt) / SLATE names / ACTION_NAME``
with the chosen item on the last line, and tokenizes it with ``truncation=True, max_length=512``.
A long prompt pushes that last line past token 512, so the expert's and the policy's texts
become identical and the discriminator cannot tell them apart.

Here the choice is the first segment of a text pair and only the second (the context) is
truncated (``truncation="only_second"``): the choice always survives. :func:`choice_cut_rate`
measures how often the original rendering loses its last line on a dataset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

_MISSING = ("", "nan", "none", "null", "na", "n/a")


def text(value: Any) -> str:
    """A field as one line of text; a missing one (None, NaN, 'n/a'...) as '' (the slate rows' own rule,
    restated here so that rewards import no task)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, str) and value.strip().lower() in _MISSING:
        return ""
    return " ".join(str(value).split())


@dataclass(frozen=True)
class DiscriminatorExample:
    """One discriminator input: ``choice`` (never truncated) and ``context``; label 1 = expert."""

    choice: str
    context: str
    label: int


def _name(item: dict[str, Any], show_ids: bool) -> str:
    title, vid = text(item.get("title")), text(item.get("id"))
    name = title or vid or "(untitled)"
    return f"{name} [id {vid}]" if show_ids and vid and title else name


def render_choice(items: list[dict[str, Any]], index: int, show_ids: bool = False) -> str:
    """``CHOSEN <title>`` for the 1-based ``index`` (ids with GRAIL_DISC_SHOW_IDS)."""
    return f"CHOSEN {_name(items[index - 1], show_ids)}"


def render_context(viewer: str, state: str, items: list[dict[str, Any]], show_ids: bool = False) -> str:
    """Viewer and slate names first, the state (the user prompt) last: truncation eats the state's tail."""
    names = [f"{i}. {_name(it, show_ids)}" for i, it in enumerate(items, 1)] or ["(none)"]
    return "\n".join([f"VIEWER: {viewer or '(none)'}", "SLATE:", *names, "STATE:", state or "(none)"])


def example_for(row: dict[str, Any], index: int, label: int, show_ids: bool = False) -> DiscriminatorExample:
    items = row["slate_items"]
    return DiscriminatorExample(
        render_choice(items, index, show_ids),
        render_context(row.get("viewer", ""), row.get("question", ""), items, show_ids),
        label,
    )


def original_rendering(row: dict[str, Any], index: int) -> str:
    """The original's single string, chosen item on the last line (for measuring its truncation)."""
    items = row["slate_items"]
    names = [f"{i}. {_name(it, False)}" for i, it in enumerate(items, 1)] or ["(none)"]
    return "\n".join(
        [
            f"VIEWER: {row.get('viewer') or '(none)'}",
            "STATE:",
            row.get("question") or "(none)",
            "SLATE (names):",
            *names,
            f"ACTION_NAME: {_name(items[index - 1], False)}",
        ]
    )


def choice_cut_rate(rows: list[dict[str, Any]], tokenizer, max_length: int = 512) -> dict[str, float]:
    """Share of rows whose original rendering (gold choice last) loses its last line at ``max_length`` tokens,
    and the same for this module's pair rendering (0 by construction, measured all the same)."""
    cut_original = cut_pair = 0
    for row in rows:
        # The chosen item is the original's tail: any truncation cuts (some of) it.
        cut_original += len(tokenizer(original_rendering(row, row["gold_index"]))["input_ids"]) > max_length
        ex = example_for(row, row["gold_index"], 1)
        ids = tokenizer(ex.choice, ex.context, truncation="only_second", max_length=max_length)["input_ids"]
        choice_ids = tokenizer(ex.choice, add_special_tokens=False)["input_ids"]
        cut_pair += not _contains(ids, choice_ids)
    n = max(len(rows), 1)
    return {"rows": len(rows), "original_choice_cut": cut_original / n, "pair_choice_cut": cut_pair / n}


def _contains(haystack: list[int], needle: list[int]) -> bool:
    return any(haystack[i : i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))
