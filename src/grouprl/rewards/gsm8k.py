"""GSM8K answers: the gold number after ``####`` and the strict ``Final: <number>`` reward.

Rules (the simple_grpo seed's contract):
- the completion, with trailing whitespace removed, must end with exactly one line
  ``Final: <number>`` and contain no other ``Final:`` line;
- ``<number>`` is an optional minus sign, digits with optional thousands commas and an
  optional decimal part (``-3``, ``3.50``, ``1,000``); ``$12``, ``12 dollars`` or
  ``twelve`` are not numbers, so the format is missing;
- both sides compare numerically with commas stripped (``18 == 18.00``, ``1,080 == 1080``).
Reward: 1.0 correct, 0.1 format right but wrong, 0.0 format missing or malformed.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

NUMBER = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_FINAL_LINE = re.compile(rf"^\s*Final:[ \t]*({NUMBER})[ \t]*$")
_ANY_FINAL = re.compile(r"^\s*Final:", re.MULTILINE)
_GOLD = re.compile(r"####\s*(\S+)\s*$")

CORRECT, FORMAT_ONLY, MISSING = 1.0, 0.1, 0.0


def normalize_number(text: str) -> str | None:
    """Canonical string of a number with commas stripped ('1,080.00' -> '1080'); None if not a number."""
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    if value.is_zero():  # "-0" and "0.00" are 0
        return "0"
    value = value.normalize()
    # normalize() writes 100 as 1E+2; quantize integers back to plain digits
    return format(value.quantize(Decimal(1)) if value == value.to_integral_value() else value, "f")


def extract_gold(answer: str) -> str | None:
    """The number after ``#### `` in a GSM8K answer field, normalised."""
    match = _GOLD.search(answer.strip())
    return normalize_number(match.group(1)) if match else None


def extract_final(completion: str) -> str | None:
    """The normalised number on the completion's last line ``Final: <number>``, else None."""
    text = completion.rstrip()
    if not text or len(_ANY_FINAL.findall(text)) != 1:
        return None
    match = _FINAL_LINE.match(text.rsplit("\n", 1)[-1])
    return normalize_number(match.group(1)) if match else None


def gsm8k_final(completion: str, ground_truth: str, **_: object) -> float:
    """1.0 if the Final number equals the gold number, 0.1 if only the format is right, else 0.0."""
    predicted = extract_final(completion)
    if predicted is None:
        return MISSING
    return CORRECT if predicted == normalize_number(ground_truth) else FORMAT_ONLY
