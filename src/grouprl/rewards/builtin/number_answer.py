"""Rewards for the procedurally generated arithmetic task (the tiny job; ``arithmetic_last_number``: the main job).

The completion is the answer alone, digits then end of sequence. ``arithmetic_digits``
gives partial credit so that a group of near misses still carries a signal:

    r = 1                                   if the answer is exactly right
    r = 0.5 * matched / max(len(pred), len(gold))   if it is a number but wrong
    r = 0                                   if it is not a number

where ``matched`` counts digits equal at the same place value (right-aligned, or
left-aligned when the row says ``answer_reversed``), the way a carry error is a near miss. Partial credit of this kind is a dense reward in the
sense of reward shaping (Ng et al., 1999); the exact-match bonus keeps the optimum at
the right answer.
"""

from __future__ import annotations

import re

_ANSWER = re.compile(r"^\s*(-?[0-9]+)\s*$")  # ASCII digits only: the gold is ASCII


def parse_answer(completion: str) -> str | None:
    match = _ANSWER.match(completion)
    return match.group(1) if match else None


_NUMBER = re.compile(r"-?[0-9]+")


def last_number(completion: str) -> str | None:
    """The last integer written in a reply ('82 + 95 = 177.' -> '177'), for chat models that do not
    answer with the number alone; ASCII digits only, like the gold."""
    numbers = _NUMBER.findall(completion)
    return numbers[-1] if numbers else None


def arithmetic_last_number(completion: str, ground_truth: str, **_: object) -> float:
    """1.0 if the last number in the reply is the answer, else 0.0."""
    return 1.0 if last_number(completion) == str(ground_truth) else 0.0


def arithmetic_exact(completion: str, ground_truth: str, **_: object) -> float:
    """1.0 if the completion is exactly the answer, else 0.0."""
    return 1.0 if parse_answer(completion) == str(ground_truth) else 0.0


def arithmetic_digits(completion: str, ground_truth: str, answer_reversed: bool = False, **_: object) -> float:
    """1.0 if right; 0.5 x digits right at their place value / answer length if a wrong number; else 0."""
    pred, gold = parse_answer(completion), str(ground_truth)
    if pred is None:
        return 0.0
    if pred == gold:
        return 1.0
    if answer_reversed:  # units digit first: place values line up on the left
        matched = sum(a == b for a, b in zip(pred, gold))
    else:
        matched = sum(a == b for a, b in zip(reversed(pred), reversed(gold)))
    return 0.5 * matched / max(len(pred), len(gold))
