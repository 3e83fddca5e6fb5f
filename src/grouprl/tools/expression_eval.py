"""Arithmetic without ``eval``: the calculator tool and the calculator environment both evaluate with it.

An AST walker accepts numbers, ``+ - * / // % **``, parentheses and unary signs only; exponents and
result sizes are bounded, so a hostile expression cannot hang or exhaust the process. Anything else
raises :class:`CalcError` with the reason.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any, Callable

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 64
MAX_MAGNITUDE = 10**100

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


class CalcError(ValueError):
    """An expression the calculator refuses or cannot evaluate."""


def _check(value: Any) -> int | float:
    if isinstance(value, complex):
        raise CalcError("complex result")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalcError("result is not finite")
    if abs(value) > MAX_MAGNITUDE:
        raise CalcError("result too large")
    return value


def _walk(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _walk(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _check(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_walk(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _walk(node.left), _walk(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalcError(f"exponent larger than {MAX_EXPONENT}")
        try:
            return _check(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise CalcError("division by zero") from None
        except OverflowError:
            raise CalcError("result too large") from None
    raise CalcError(f"unsupported expression element: {type(node).__name__}")


def safe_eval(expression: str) -> int | float:
    """The value of an arithmetic expression; raises :class:`CalcError` on anything else."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalcError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise CalcError("invalid syntax") from None
    try:
        return _walk(tree)
    except RecursionError:
        raise CalcError("expression nested too deeply") from None
