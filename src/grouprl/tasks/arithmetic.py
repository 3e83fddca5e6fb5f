"""Procedurally generated arithmetic: ``a+b-c`` style questions, answer digits only.

Seeded and reproducible; the held-out split never shares a question with training.
"""

from __future__ import annotations

import random
from typing import Any

# The tiny model's tokenizer is built from exactly these characters.
ALPHABET = "0123456789+-= "


def make_question(rng: random.Random, digits: int, operands: int, operators: str = "+") -> tuple[str, int]:
    lo, hi = 10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1
    nums = [rng.randint(lo, hi) for _ in range(operands)]
    ops = [rng.choice(operators) for _ in range(operands - 1)]
    text, value = str(nums[0]), nums[0]
    for op, n in zip(ops, nums[1:]):
        text += op + str(n)
        value = value + n if op == "+" else value - n
    return text, value


def generate_rows(n_train: int, n_eval: int, digits: int, operands: int, operators: str = "+",
                  seed: int = 1234) -> tuple[list, list]:
    """Disjoint train/eval rows; the data seed is fixed so every run sees the same task."""
    rng = random.Random(seed)
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    attempts = 0
    while len(rows) < n_train + n_eval:
        attempts += 1
        if attempts > 50 * (n_train + n_eval):
            raise ValueError(f"arithmetic: cannot draw {n_train + n_eval} distinct questions with {operands} operands of "
                             f"{digits} digits; lower n_train or raise arithmetic_digits")
        question, value = make_question(rng, digits, operands, operators)
        if question in seen:
            continue
        seen.add(question)
        rows.append({"question": question, "ground_truth": str(value), "gold_completion": str(value)})
    return rows[:n_train], rows[n_train:]
