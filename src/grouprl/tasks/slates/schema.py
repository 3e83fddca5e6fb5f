"""The slate rows of the GRAIL datasets (od2961/grail-gun, od2961/grail-wage): fields, gold, opinion label.

A row is one step of a viewer's YouTube session: the slate of recommendations shown, the video
clicked next (the gold), what is playing now and what was watched before, who the viewer is
and their survey answers. Survey fields may sit at the top level or inside a nested
``selected_survey_row`` dict (or its JSON string); the top level wins.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class IssueSpec:
    """What differs between the two issues: names, the opinion index and the stance items."""

    key: str  # the row's `issue` value
    label: str  # how the question names it
    index_before: str
    index_after: str
    # Survey items shown in SURVEY HIGHLIGHTS: wave-1 (pre-treatment) only. The wave-2 answers
    # are measured after the session, i.e. they are the opinion label; showing them would leak it.
    items: tuple[tuple[str, str], ...]
    # Stance fields read for the "Initial Viewpoint" line: (field, supports text, opposes text).
    stances: tuple[tuple[str, str, str], ...]
    yes_no_items: frozenset[str] = frozenset()  # items answered yes/no (0/1 in the data)


GUN = IssueSpec(
    "gun_control",
    "gun control",
    "gun_index",
    "gun_index_2",
    (
        ("stricter_laws", "wants stricter gun laws"),
        ("handgun_ban", "supports a handgun ban"),
        ("assault_ban", "supports an assault weapons ban"),
        ("concealed_safe", "thinks concealed carry is safe"),
        ("gun_importance", "gun policy importance"),
        ("gun_index", "gun-control index"),
        ("gun_enthusiasm", "gun enthusiasm"),
    ),
    (
        ("stricter_laws", "Supports stricter gun laws", "Opposes stricter gun laws"),
        ("gun_index", "Supports stricter gun laws", "Opposes stricter gun laws"),
    ),
    frozenset({"stricter_laws", "handgun_ban", "assault_ban", "concealed_safe"}),
)
WAGE = IssueSpec(
    "minimum_wage",
    "the minimum wage",
    "mw_index_w1",
    "mw_index_w2",
    (
        ("minwage15_w1", "supports a $15 minimum wage"),
        ("mw_support_w1", "minimum-wage support"),
        ("minwage_text_w1", "preferred minimum wage"),
        ("mw_index_w1", "minimum-wage index"),
    ),
    (
        ("minwage15_w1", "Supports a $15 minimum wage", "Opposes a $15 minimum wage"),
        ("mw_support_w1", "Supports raising the minimum wage", "Opposes raising the minimum wage"),
        ("mw_index_w1", "Supports raising the minimum wage", "Opposes raising the minimum wage"),
    ),
    frozenset({"minwage15_w1"}),
)
ISSUES = {GUN.key: GUN, WAGE.key: WAGE}
STUDY_ISSUE = {"study1": GUN.key, "study2": WAGE.key, "study3": WAGE.key}
OPINIONS = ("increase", "decrease", "no_change")
NO_CHANGE_TOLERANCE = 1e-6


def is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and value.strip().lower() in ("", "nan", "none", "null", "na", "n/a")


def as_list_json(value: Any, where: str = "") -> list:
    """A list field that may be a list, a JSON string of one, or missing (-> [])."""
    if is_missing(value):
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: not valid JSON ({err.msg}); expected a JSON list") from None
        if isinstance(parsed, list):
            return parsed
        raise ValueError(f"{where}: JSON holds a {type(parsed).__name__}; expected a list")
    raise ValueError(f"{where}: got a {type(value).__name__}; expected a list or a JSON string of one")


def _survey(row: dict[str, Any]) -> dict[str, Any]:
    nested = row.get("selected_survey_row")
    if isinstance(nested, str) and nested.strip():
        try:
            nested = json.loads(nested)
        except json.JSONDecodeError:
            nested = None
    return nested if isinstance(nested, dict) else {}


def field_value(row: dict[str, Any], key: str) -> Any:
    """A field from the row, else from its nested ``selected_survey_row``; None when missing."""
    value = row.get(key)
    if is_missing(value):
        value = _survey(row).get(key)
    return None if is_missing(value) else value


def as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if is_missing(value):
        return None
    try:
        number = float(str(value).strip().replace(",", "").lstrip("$"))
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def text(value: Any) -> str:
    return "" if is_missing(value) else " ".join(str(value).split())


def canonical_title(title: Any) -> str:
    """Lowercase ``[a-z0-9]`` only: how titles are compared when ids do not match."""
    return re.sub(r"[^a-z0-9]", "", text(title).lower())


def issue_of(row: dict[str, Any]) -> IssueSpec | None:
    issue = text(field_value(row, "issue")).lower()
    if issue not in ISSUES:
        issue = STUDY_ISSUE.get(text(field_value(row, "participant_study")).lower(), "")
    return ISSUES.get(issue)


def slate_items(row: dict[str, Any], where: str = "") -> list[dict[str, Any]]:
    items = as_list_json(row.get("slate_items_json"), f"{where} field 'slate_items_json'")
    return [it for it in items if isinstance(it, dict)]


def prior_and_current(row: dict[str, Any], where: str = "") -> tuple[list[dict[str, Any]], int | None]:
    """The watched videos before the last occurrence of the current one, and that occurrence's index.

    ``watched_vids_json`` holds the whole session (future clicks included), so when the current
    video cannot be found nothing is shown: guessing a cut could leak the gold.
    """
    vids = [text(v) for v in as_list_json(row.get("watched_vids_json"), f"{where} field 'watched_vids_json'")]
    detailed = [
        d
        for d in as_list_json(row.get("watched_detailed_json"), f"{where} field 'watched_detailed_json'")
        if isinstance(d, dict)
    ]
    current = text(row.get("current_video_id"))
    if not current:
        return [], None
    ids = [text(d.get("id")) for d in detailed]
    if current in ids:
        cut = len(ids) - 1 - ids[::-1].index(current)
        return detailed[:cut], cut
    if current in vids:
        cut = len(vids) - 1 - vids[::-1].index(current)
        # Detailed entries without ids line up with the id list by position.
        return detailed[:cut] if len(detailed) >= cut else [], cut
    return [], None


def gold_id(row: dict[str, Any], solution_key: str = "next_video_id", where: str = "") -> str | None:
    """The configured solution column, else the video after the current one in the watch list."""
    value = text(row.get(solution_key))
    if value:
        return value
    vids = [text(v) for v in as_list_json(row.get("watched_vids_json"), f"{where} field 'watched_vids_json'")]
    current = text(row.get("current_video_id"))
    if current in vids:
        cut = len(vids) - 1 - vids[::-1].index(current)
        if cut + 1 < len(vids):
            return vids[cut + 1] or None
    return None


def gold_index(items: list[dict[str, Any]], gold: str | None, gold_title: Any = None) -> int | None:
    """1-based position of the gold id in the slate, else of its canonical title; None when absent."""
    if gold:
        for i, it in enumerate(items, 1):
            if text(it.get("id")) == gold:
                return i
    wanted = canonical_title(gold_title)
    if wanted:
        for i, it in enumerate(items, 1):
            if canonical_title(it.get("title")) == wanted:
                return i
    return None


def opinion_label(row: dict[str, Any], issue: IssueSpec | None) -> str | None:
    """increase / decrease / no_change from after - before of the issue's index; None when missing."""
    if issue is None:
        return None
    before = as_number(field_value(row, issue.index_before))
    after = as_number(field_value(row, issue.index_after))
    if before is None or after is None:
        return None
    delta = after - before
    if abs(delta) <= NO_CHANGE_TOLERANCE:
        return "no_change"
    return "increase" if delta > 0 else "decrease"


@dataclass
class DropCounts:
    """Why rows were left out (every drop is counted and logged, never silent)."""

    kept: int = 0
    empty_slate: int = 0
    gold_not_in_slate: int = 0
    no_gold: int = 0
    examples: dict[str, str] = field(default_factory=dict)  # reason -> first row that hit it

    def drop(self, reason: str, where: str) -> None:
        setattr(self, reason, getattr(self, reason) + 1)
        self.examples.setdefault(reason, where)

    @property
    def dropped(self) -> int:
        return self.empty_slate + self.gold_not_in_slate + self.no_gold

    def summary(self) -> str:
        return (
            f"kept {self.kept}, dropped {self.dropped} (empty slate {self.empty_slate}, no gold id "
            f"{self.no_gold}, gold not in slate {self.gold_not_in_slate})"
        )
