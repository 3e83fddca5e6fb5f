"""Calculator: answer an arithmetic or GSM8K question, calling a calculator as often as needed.

Each action is either ``calc(<expression>)``, whose result is added to the observation (the
episode goes on), or ``Final: <number>``, which ends the episode with
reward 1.0 when the number equals the answer (compared with
:func:`grouprl.rewards.builtin.gsm8k.normalize_number`) and 0.0 otherwise. The action is read from
its last non-empty line (``<action>...</action>`` tags are stripped first), so reasoning may
come before it. Anything else is invalid: reward 0.0, nothing advances, ``info["invalid"]``.

Expressions are evaluated by ``tools/expression_eval.py``'s AST walker, never ``eval``: numbers, ``+ - * / // % **``,
parentheses and unary signs only; exponents and result sizes are bounded; errors such as a
division by zero come back as an ``error: ...`` result rather than an exception.
"""

from __future__ import annotations

import re
from typing import Any

from grouprl.records import Observation, StepResult, stable_id
from grouprl.rewards.builtin.gsm8k import NUMBER, normalize_number
from grouprl.tasks.envs.grid_base import strip_tags
from grouprl.tasks.interface import Environment
from grouprl.tools.expression_eval import CalcError, safe_eval

SYSTEM_PROMPT = (
    "Solve the problem. You have a calculator: to use it, answer with "
    "<action>calc(<expression>)</action> using numbers, + - * / // % ** and parentheses, and its "
    "result will be shown to you. Call it as often as you need. When you know the answer, answer "
    "with <action>Final: <number></action>."
)

_CALC = re.compile(r"^calc\((.*)\)$", re.DOTALL)
_FINAL = re.compile(rf"^Final:[ \t]*({NUMBER})$")


def format_number(value: float) -> str:
    """'14', '0.5', '0.6666666667': integral floats without the '.0', others to 10 significant digits."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.10g}"
    return str(value)


def calculate(expression: str) -> str:
    """The calculator's reply: the formatted result, or ``error: <why>``."""
    try:
        return format_number(safe_eval(expression))
    except CalcError as exc:
        return f"error: {exc}"


class Calculator(Environment):
    """Calculator-tool environment following the ``reset(seed)`` / ``step(action)`` protocol.

    ``max_calls`` bounds the calculator calls; the next one ends the episode (``truncated``).
    The seed is ignored: the question fixes the episode.
    """

    def __init__(self, question: str, answer: str | float, max_calls: int = 8, instructions: str | None = None):
        self.instructions = instructions or SYSTEM_PROMPT
        self.question = question
        self.answer = normalize_number(str(answer))
        if self.answer is None:
            raise ValueError(f"calculator: answer {answer!r} is not a number")
        self.max_calls = max_calls
        self.question_id = stable_id(question)
        self.calls: list[tuple[str, str]] = []  # (expression, result)
        self.done = True

    @classmethod
    def from_row(cls, row: dict[str, Any], **kwargs: Any) -> Calculator:
        """Build from a grouprl arithmetic or GSM8K task row (``question``, ``ground_truth``)."""
        answer = str(row["ground_truth"]).strip()
        if row.get("answer_reversed"):  # arithmetic rows may store the digits reversed
            sign = "-" if answer.startswith("-") else ""
            answer = sign + answer.lstrip("-")[::-1]
        return cls(row["question"], answer, **kwargs)

    # --- protocol ---------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> Observation:
        self.calls, self.done = [], False
        return self.observation()

    def expert_action(self) -> str:
        """One calculator call on an arithmetic question (an expression), then the answer."""
        if not self.calls and calculate(self.question).lstrip("-").replace(".", "").isdigit():
            return f"calc({self.question})"
        return f"Final: {self.answer}"

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult(self.observation(), 0.0, True, {"invalid": True, "already_done": True})
        lines = [line.strip() for line in strip_tags(action).splitlines() if line.strip()]
        line = lines[-1] if lines else ""
        final = _FINAL.match(line)
        if final:
            prediction = normalize_number(final.group(1))
            correct = prediction is not None and prediction == self.answer
            self.done = True
            return StepResult(
                self.observation(),
                1.0 if correct else 0.0,
                True,
                {"prediction": prediction, "correct": correct, "answer": self.answer},
            )
        call = _CALC.match(line)
        if not call:
            return StepResult(self.observation(), 0.0, False, {"invalid": True})
        if len(self.calls) >= self.max_calls:
            self.done = True
            return StepResult(self.observation(), 0.0, True, {"truncated": True, "correct": False})
        expression = call.group(1).strip()
        result = calculate(expression)
        self.calls.append((expression, result))
        return StepResult(
            self.observation(),
            0.0,
            False,
            {"expression": expression, "result": result, "calc_error": result.startswith("error:")},
        )

    # --- views ------------------------------------------------------------------------------
    @property
    def anchor_state(self) -> tuple[str, tuple[str, ...]]:
        return (self.question_id, tuple(result for _, result in self.calls))

    def observation(self) -> Observation:
        """The question and every calculator result so far: the whole state, so any history
        window (even none) keeps what the agent needs."""
        lines = [self.question] + [f"calc({expression}) = {result}" for expression, result in self.calls]
        return Observation(text="\n".join(lines), anchor_state=self.anchor_state, admissible_actions=None)
