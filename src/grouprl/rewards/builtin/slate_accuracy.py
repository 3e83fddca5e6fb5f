"""``slate_accuracy``: the option in ``<answer>`` and the direction in ``<opinion>``, against the labels.

Parse table (``<answer>`` payload, case-insensitive, surrounding whitespace ignored):
  ``3`` / ``option 3`` / ``Option 3``        -> 3
  ``3.`` / ``"3"`` / ``#3`` / a title / empty -> unparsed (not a number)
  no ``<answer>`` tag                         -> unparsed, unless PUREACC_ALLOW_BARE_NUMBER=1 (or the
                                                 ``allow_bare_number`` option): then the whole text is
                                                 read by the same rule
  a number outside 1..n_options               -> parsed, but wrong (one of more than 9 digits reads as 0)
  digits other than ASCII 0-9                 -> unparsed
Opinion synonyms map to ``increase`` / ``decrease`` / ``no_change``.
Reward = mean of the parts whose label exists (click always, opinion when the row has a label):
0, 0.5 or 1.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
OPINION = re.compile(r"<opinion>(.*?)</opinion>", re.IGNORECASE | re.DOTALL)
INDEX_ONLY = re.compile(r"^(?:option\s*)?([0-9]+)$", re.IGNORECASE)
MAX_INDEX_DIGITS = 9  # longer digit runs are a number no slate has: parsed, out of range (never int())
SYNONYMS = {
    "increase": {
        "increase",
        "increased",
        "increases",
        "increasing",
        "higher",
        "rise",
        "rises",
        "rose",
        "up",
        "more",
        "grow",
        "grows",
        "stronger",
        "strengthen",
        "strengthened",
    },
    "decrease": {
        "decrease",
        "decreased",
        "decreases",
        "decreasing",
        "lower",
        "drop",
        "drops",
        "dropped",
        "down",
        "less",
        "fall",
        "falls",
        "fell",
        "decline",
        "declined",
        "weaker",
        "weaken",
        "weakened",
    },
    "no_change": {
        "no_change",
        "no change",
        "nochange",
        "same",
        "stay the same",
        "stays the same",
        "unchanged",
        "steady",
        "stable",
        "none",
        "neutral",
        "remain",
        "remains the same",
        "no-change",
    },
}
WORD_TO_OPINION = {w: label for label, words in SYNONYMS.items() for w in words}


@dataclass(frozen=True)
class SlateAnswer:
    formatted: bool  # an <answer> tag is present
    choice: int | None  # the parsed option number (may be out of range)
    opinion: str | None  # increase / decrease / no_change, or None when missing or unreadable

    def in_range(self, n_options: int | None) -> bool:
        return self.choice is not None and (n_options is None or 1 <= self.choice <= n_options)


def bare_numbers_allowed(option: bool | None = None) -> bool:
    return option if option is not None else os.environ.get("PUREACC_ALLOW_BARE_NUMBER", "0") == "1"


def parse_choice(text: str, allow_bare_number: bool | None = None) -> tuple[bool, int | None]:
    """(tag present, option number or None)."""
    match = ANSWER.search(text or "")
    if match:
        payload = match.group(1).strip()
    elif bare_numbers_allowed(allow_bare_number):
        payload = (text or "").strip()
    else:
        return False, None
    number = INDEX_ONLY.match(payload)
    if number is None:
        return match is not None, None
    digits = number.group(1).lstrip("0") or "0"
    return match is not None, int(digits) if len(digits) <= MAX_INDEX_DIGITS else 0


def parse_opinion(text: str) -> str | None:
    match = OPINION.search(text or "")
    if not match:
        return None
    word = " ".join(match.group(1).strip().lower().replace("_", " ").split())
    return WORD_TO_OPINION.get(word) or WORD_TO_OPINION.get(word.replace(" ", "_"))


def parse_slate_answer(text: str, allow_bare_number: bool | None = None) -> SlateAnswer:
    formatted, choice = parse_choice(text, allow_bare_number)
    return SlateAnswer(formatted, choice, parse_opinion(text))


def _gold(ground_truth) -> int:
    try:
        return int(str(ground_truth).strip())
    except ValueError:
        raise ValueError(f"slate_accuracy: ground truth {ground_truth!r} is not an option number") from None


def slate_accuracy(
    completion: str,
    ground_truth,
    n_options: int | None = None,
    opinion_label: str | None = None,
    allow_bare_number: bool | None = None,
    **_: object,
) -> float:
    """Mean over the labelled parts of: chosen option == gold index, opinion == label."""
    answer = parse_slate_answer(completion, allow_bare_number)
    parts = [float(answer.in_range(n_options) and answer.choice == _gold(ground_truth))]
    if opinion_label in SYNONYMS:
        parts.append(float(answer.opinion == opinion_label))
    elif opinion_label is not None:
        raise ValueError(f"slate_accuracy: opinion label {opinion_label!r}; expected one of {sorted(SYNONYMS)}")
    return sum(parts) / len(parts)


def slate_click(
    completion: str, ground_truth, n_options: int | None = None, allow_bare_number: bool | None = None, **_: object
) -> float:
    """1.0 when the chosen option is the clicked one (next-click accuracy), else 0.0."""
    answer = parse_slate_answer(completion, allow_bare_number)
    return float(answer.in_range(n_options) and answer.choice == _gold(ground_truth))


def slate_opinion(completion: str, ground_truth=None, opinion_label: str | None = None, **_: object) -> float | None:
    """1.0 when the opinion direction matches the label; None (no opinion) on rows without a label."""
    if opinion_label is None:
        return None
    return float(parse_opinion(completion) == opinion_label)
