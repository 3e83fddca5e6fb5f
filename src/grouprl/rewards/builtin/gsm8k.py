"""GSM8K answers: the gold number after ``####`` and the ``Final: <number>`` reward.

Rules (the simple_grpo seed's contract):
- the completion, with trailing whitespace removed, must end with a line ``Final: <number>``;
  that last line is the answer, whatever came before it (earlier ``Final:`` lines included:
  ``Final: 5\nMore work.\nFinal: 7`` answers 7). With ``strict=True`` there must be no other
  ``Final:`` line at all (a completion that changes its mind scores 0.0);
- ``<number>`` is an optional minus sign, digits with optional thousands commas and an
  optional decimal part (``-3``, ``3.50``, ``1,000``); ``$12``, ``12 dollars`` or
  ``twelve`` are not numbers, so the format is missing;
- both sides compare numerically with commas stripped (``18 == 18.00``, ``1,080 == 1080``), by
  their canonical digit strings, so a number of any length compares exactly (no 28-digit context)
  and only ASCII digits are digits (``١٨`` or ``１８`` is not a number here: the format is missing).
Reward: 1.0 correct, 0.1 format right but wrong, 0.0 format missing or malformed.
"""

from __future__ import annotations

import re

NUMBER = r"-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?"
_NUMBER_PARTS = re.compile(r"(-?)([0-9,]+)(?:\.([0-9]+))?", re.ASCII)
_FINAL_LINE = re.compile(rf"^\s*Final:[ \t]*({NUMBER})[ \t]*$", re.ASCII)
_ANY_FINAL = re.compile(r"^\s*Final:", re.MULTILINE | re.ASCII)
_GOLD = re.compile(r"####\s*(\S+)\s*$")

CORRECT, FORMAT_ONLY, MISSING = 1.0, 0.1, 0.0


def normalize_number(text: str) -> str | None:
    """Canonical string of a number with commas stripped ('1,080.00' -> '1080'); None if not a number.

    Pure string work (no ``Decimal``, no ``int``): a 29-digit or a million-digit number is just a
    longer string, never an error."""
    text = str(text).strip()
    parts = _NUMBER_PARTS.fullmatch(text) if re.fullmatch(NUMBER, text, re.ASCII) else None
    if parts is None:
        return None
    sign, whole, fraction = parts.groups()
    whole = whole.replace(",", "").lstrip("0") or "0"
    fraction = (fraction or "").rstrip("0")
    if whole == "0" and not fraction:  # "-0" and "0.00" are 0
        return "0"
    return sign + whole + ("." + fraction if fraction else "")


def extract_gold(answer: str) -> str | None:
    """The number after ``#### `` in a GSM8K answer field, normalised."""
    match = _GOLD.search(answer.strip())
    return normalize_number(match.group(1)) if match else None


def extract_final(completion: str, strict: bool = False) -> str | None:
    """The normalised number on the completion's last line ``Final: <number>``, else None
    (``strict``: also None when any earlier line starts with ``Final:``)."""
    text = completion.rstrip()
    if not text or (strict and len(_ANY_FINAL.findall(text)) != 1):
        return None
    match = _FINAL_LINE.match(text.rsplit("\n", 1)[-1])
    return normalize_number(match.group(1)) if match else None


def gsm8k_final(completion: str, ground_truth: str, strict: bool = False, **_: object) -> float:
    """1.0 if the Final number equals the gold number, 0.1 if only the format is right, else 0.0.

    ``strict=True`` (recipe: ``{name: gsm8k_final, options: {strict: true}}``) also gives 0.0 to a
    completion with more than one ``Final:`` line.
    """
    predicted = extract_final(completion, strict)
    if predicted is None:
        return MISSING
    return CORRECT if predicted == normalize_number(ground_truth) else FORMAT_ONLY
