"""The user prompt of the slate task, block by block, and the system prompt (the answer contract).

Blocks, separated by one blank line: VIEWER (+ Initial Viewpoint), CURRENTLY WATCHING,
RECENTLY WATCHED (NEWEST LAST), SURVEY HIGHLIGHTS (left out when empty), OPTIONS, QUESTIONS.
Missing fields leave their fragment out; they never print "None" or "nan".
"""

from __future__ import annotations

import re
from typing import Any

from grouprl.tasks.slates.schema import IssueSpec, as_number, field_value, prior_and_current, text

SYSTEM_PROMPT = (
    "You predict what a YouTube viewer does next. Read the viewer, what they watch now and before, and the "
    "numbered options. Think briefly, then answer exactly in this format:\n"
    "<think>...</think><answer>N</answer><opinion>increase|decrease|no_change</opinion>\n"
    "N is the option number alone (for example 2). The opinion is the direction of the viewer's view on the "
    "issue after this recommendation."
)
NO_PROFILE = "VIEWER (profile information unavailable)"
NO_HISTORY = "(no recently watched videos available)"

# Survey codes as the studies coded them; any other value is printed as written.
GENDER = {"1": "man", "2": "woman", "male": "man", "female": "woman", "man": "man", "woman": "woman"}
RACE = {
    "1": "White",
    "2": "Black",
    "3": "Hispanic",
    "4": "Asian",
    "5": "Native American",
    "6": "multiracial",
    "7": "other-race",
}
PARTY = {"1": "Democrat", "2": "Republican", "3": "Independent", "4": "other party"}
IDEOLOGY = {
    1: "very liberal",
    2: "liberal",
    3: "slightly liberal",
    4: "moderate",
    5: "slightly conservative",
    6: "conservative",
    7: "very conservative",
}
YES = {"1", "1.0", "true", "yes", "y", "support", "supports", "favor", "agree"}
NO = {"0", "0.0", "false", "no", "n", "oppose", "opposes", "against", "disagree"}


def _code(value: Any, table: dict[str, str]) -> str:
    raw = text(value)
    number = as_number(raw)
    key = str(int(number)) if number is not None and number == int(number) else raw.lower()
    return table.get(key, raw)


def _number_text(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:.2f}".rstrip("0")


def _plain(value: Any, yes_no: bool = False) -> str:
    """yes/no for yes/no items and booleans, trimmed numbers, else the text ('$15' stays '$15')."""
    if isinstance(value, bool) or (yes_no and _yes_no(value) is not None):
        return "yes" if _yes_no(value) else "no"
    if text(value).startswith("$"):
        return text(value)
    number = as_number(value)
    return _number_text(number) if number is not None else text(value)


def _ideology(value: Any) -> str:
    number = as_number(value)
    if number is not None and 1 <= number <= 7:
        return IDEOLOGY[int(round(number))]
    return text(value).lower()


def _yes_no(value: Any) -> bool | None:
    """True/False for readable support/opposition (booleans, yes/no words, 0-1 scores), else None."""
    if isinstance(value, bool):
        return value
    raw = text(value).lower()
    if raw in YES:
        return True
    if raw in NO:
        return False
    number = as_number(raw)
    if number is not None and 0 <= number <= 1 and number != 0.5:
        return number > 0.5
    if any(w in raw for w in ("oppose", "against", "disagree")):
        return False
    if any(w in raw for w in ("support", "favor", "agree")):
        return True
    return None


def viewer_summary(row: dict[str, Any]) -> str:
    """'34 years old; White woman; Democrat, liberal; income $50k-$75k; college-educated; watches YouTube daily'."""
    parts: list[str] = []
    age = field_value(row, "age")
    if age is not None:
        number = as_number(age)
        parts.append(f"{int(number)} years old" if number is not None else text(age))
    race = _code(field_value(row, "q29"), RACE) if field_value(row, "q29") is not None else ""
    gender = _code(field_value(row, "q26"), GENDER) if field_value(row, "q26") is not None else ""
    if race or gender:
        parts.append(" ".join(p for p in (race, gender) if p))
    party = _code(field_value(row, "pid1"), PARTY) if field_value(row, "pid1") is not None else ""
    ideology = _ideology(field_value(row, "ideo1")) if field_value(row, "ideo1") is not None else ""
    if party or ideology:
        parts.append(", ".join(p for p in (party, ideology) if p))
    if field_value(row, "q31") is not None:
        parts.append(f"income {text(field_value(row, 'q31'))}")
    college = field_value(row, "college")
    if college is not None:
        yes = _yes_no(college)
        parts.append(
            "college-educated" if yes else "not college-educated" if yes is False else f"education {text(college)}"
        )
    if field_value(row, "freq_youtube") is not None:
        parts.append(f"watches YouTube {text(field_value(row, 'freq_youtube'))}")
    return "; ".join(parts)


def stance_line(row: dict[str, Any], issue: IssueSpec | None) -> str | None:
    """'Initial Viewpoint: Supports stricter gun laws' from the first readable stance field."""
    if issue is None:
        return None
    for key, supports, opposes in issue.stances:
        yes = _yes_no(field_value(row, key))
        if yes is not None:
            return f"Initial Viewpoint: {supports if yes else opposes}"
    return None


def _seconds(entry: dict[str, Any], seconds_key: str, ms_key: str) -> float | None:
    value, ms = as_number(entry.get(seconds_key)), as_number(entry.get(ms_key))
    if value is None and ms is not None:
        value = ms / 1000.0
    return value


def duration_seconds(value: Any) -> float | None:
    """Seconds from a number or an ISO-8601 duration ('PT4M13S')."""
    number = as_number(value)
    if number is not None:
        return number if number > 0 else None
    match = re.fullmatch(r"P?T?(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?", text(value).upper())
    if match and any(match.groups()):
        h, m, s = (int(g or 0) for g in match.groups())
        return float(h * 3600 + m * 60 + s) or None
    return None


def _title(entry: dict[str, Any], show_ids: bool) -> str:
    title, vid = text(entry.get("title")), text(entry.get("id"))
    if not title:
        return f"(untitled) [id {vid}]" if vid else "(untitled)"
    return f"{title} [id {vid}]" if show_ids and vid else title


def history_line(k: int, entry: dict[str, Any], show_ids: bool) -> str:
    watched = _seconds(entry, "watch_seconds", "watch_ms")
    total = _seconds(entry, "total_length", "total_length_ms")
    details = []
    if watched is not None and total:
        details.append(f"watched {round(watched)}s of {round(total)}s ({round(100 * watched / total)}% complete)")
    elif watched is not None:
        details.append(f"watched {round(watched)}s")
    channel = text(entry.get("channel_title"))
    if channel:
        details.append(f"from {channel}")
    return f"{k}. {_title(entry, show_ids)}" + (f" ({', '.join(details)})" if details else "")


def option_line(i: int, item: dict[str, Any], show_ids: bool) -> str:
    details = [text(item.get("channel_title"))] if text(item.get("channel_title")) else []
    seconds = duration_seconds(item.get("duration"))
    if seconds is not None:
        details.append(f"{round(seconds)}s long")
    line = f"{i}. {_title(item, show_ids)}" + (f" ({', '.join(details)})" if details else "")
    counts = [
        (name, as_number(item.get(key)))
        for name, key in (("views", "view_count"), ("likes", "like_count"), ("comments", "comment_count"))
    ]
    shown = [f"{name} {int(n):,}" for name, n in counts if n is not None]
    return line + (f" — Engagement: {', '.join(shown)}" if shown else "")


def survey_sentence(row: dict[str, Any], issue: IssueSpec | None) -> str:
    general = (
        ("pid1", "party", lambda v: _code(v, PARTY)),
        ("pid2", "lean", text),
        ("ideo1", "ideology", _ideology),
        ("pol_interest", "political interest", text),
        ("religpew", "religion", text),
        ("freq_youtube", "YouTube use", text),
        ("newsint", "news interest", text),
    )
    parts = [
        f"{label} {fmt(field_value(row, key))}" for key, label, fmt in general if field_value(row, key) is not None
    ]
    items, yes_no = (issue.items, issue.yes_no_items) if issue else ((), ())
    for key, label in items:
        value = field_value(row, key)
        if value is not None:
            parts.append(f"{label}: {_plain(value, key in yes_no)}")
    return ("; ".join(parts) + ".") if parts else ""


def build_prompt(
    row: dict[str, Any],
    issue: IssueSpec | None,
    items: list[dict[str, Any]],
    max_history: int = 12,
    show_ids: bool = False,
) -> str:
    """The user message for one row (``items`` is the parsed slate)."""
    summary = viewer_summary(row)
    viewer = f"VIEWER {summary}." if summary else NO_PROFILE
    stance = stance_line(row, issue)
    blocks = [viewer + (f"\n{stance}" if stance else "")]

    current = {"id": row.get("current_video_id"), "title": row.get("current_video_title")}
    channel = text(row.get("current_video_channel"))
    blocks.append(f"CURRENTLY WATCHING {_title(current, show_ids)}" + (f" (from {channel})" if channel else ""))

    prior, _ = prior_and_current(row)
    if max_history > 0:
        prior = prior[-max_history:]
    lines = [history_line(k, e, show_ids) for k, e in enumerate(prior, 1)] or [NO_HISTORY]
    blocks.append("\n".join(["RECENTLY WATCHED (NEWEST LAST)", *lines]))

    survey = survey_sentence(row, issue)
    if survey:
        blocks.append(f"SURVEY HIGHLIGHTS\n{survey}")

    blocks.append("\n".join(["OPTIONS", *(option_line(i, it, show_ids) for i, it in enumerate(items, 1))]))
    issue_name = issue.label if issue else "the issue"
    blocks.append(
        "QUESTIONS\n1. Which option number will the viewer watch next?\n"
        f"2. After this recommendation, will the viewer's opinion on {issue_name} increase, decrease, "
        "or stay the same?"
    )
    return "\n\n".join(blocks)
