"""Procedurally generated arithmetic: ``a+b-c`` style questions, answer digits only.

Seeded and reproducible; the held-out split never shares a question with training.
"""

from __future__ import annotations

import random
import re
from typing import Any

from grouprl.config import Config
from grouprl.rewards.builtin.number_answer import last_number, parse_answer
from grouprl.tasks.base import SingleTurnTask
from grouprl.tasks.registry import register_task

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


def spaced(question: str) -> str:
    """'47+38-5' -> '47 + 38 - 5' (operands are never negative, so every sign is an operator)."""
    return re.sub(r"([+-])", r" \1 ", question)


def reverse_digits(number: str) -> str:
    """'124' -> '421', '-35' -> '-53': the sign stays in front."""
    sign = "-" if number.startswith("-") else ""
    return sign + number.lstrip("-")[::-1]


def generate_rows(
    n_train: int,
    n_eval: int,
    digits: int,
    operands: int,
    operators: str = "+",
    reverse_answer: bool = False,
    seed: int = 1234,
) -> tuple[list, list]:
    """Disjoint train/eval rows; the data seed is fixed so every run sees the same task.

    With ``reverse_answer`` the expected completion is the answer's digits least-significant
    first (124 -> "421"), the order in which a carry is computed: small transformers learn
    addition far more smoothly that way (Lee et al., 2023, "Teaching Arithmetic to Small
    Transformers"). ``ground_truth`` is then that reversed string.
    """
    rng = random.Random(seed)
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    attempts = 0
    while len(rows) < n_train + n_eval:
        attempts += 1
        if attempts > 50 * (n_train + n_eval):
            raise ValueError(
                f"arithmetic: cannot draw {n_train + n_eval} distinct questions with {operands} operands of "
                f"{digits} digits; lower n_train or raise arithmetic_digits"
            )
        question, value = make_question(rng, digits, operands, operators)
        if question in seen:
            continue
        seen.add(question)
        answer = reverse_digits(str(value)) if reverse_answer else str(value)
        rows.append(
            {"question": question, "ground_truth": answer, "gold_completion": answer, "answer_reversed": reverse_answer}
        )
    return rows[:n_train], rows[n_train:]


@register_task("arithmetic", max_new_tokens=6)
def build_arithmetic(cfg: Config) -> SingleTurnTask:
    task_config, own = cfg.task, cfg.arithmetic
    train, held_out = generate_rows(
        task_config.n_train or 6000,
        max(cfg.eval.n_eval, 1),
        own.arithmetic_digits,
        own.arithmetic_operands,
        own.arithmetic_operators,
        own.arithmetic_reverse_answer,
    )
    if own.arithmetic_prompt:  # a chat model is asked in words: "Compute 47 + 38. Reply with only the number."
        for row in train + held_out:
            row["question"] = own.arithmetic_prompt.format(question=spaced(row["question"]))
    if own.arithmetic_answer == "last_number":  # '47 + 38 = 85' answers too; no partial credit to game
        rewards, correct, predict = ["arithmetic_last_number"], "arithmetic_last_number", last_number
    else:
        rewards, correct, predict = ["arithmetic_digits"], "arithmetic_exact", parse_answer
    return SingleTurnTask(
        "arithmetic",
        train,
        held_out,
        task_config.system_prompt,
        rewards,
        correct,
        corpus_extra=ALPHABET,
        predict=predict,
    )
