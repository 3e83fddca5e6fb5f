"""The two tools every framework example here gives its agent: exact arithmetic and unit factors.

Plain functions with docstrings and type hints, the way each framework's docs declare a tool; nothing here
knows grouprl.
"""

from __future__ import annotations

import ast
import operator

SYSTEM_PROMPT = "Use the tools to answer. End with: Answer: <number>"

FACTORS = {"mile": (5280, "feet"), "yard": (36, "inches"), "foot": (12, "inches"), "day": (86400, "seconds"),
           "hour": (3600, "seconds"), "week": (168, "hours"), "gallon": (128, "fluid ounces"),
           "pound": (16, "ounces"), "ton": (2000, "pounds"), "kilometer": (1000, "meters"),
           "kilogram": (1000, "grams"), "year": (365, "days")}
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.USub: operator.neg}


def calculator(expression: str) -> str:
    """Evaluate arithmetic exactly.

    Args:
        expression: the arithmetic to evaluate, e.g. "4821 * 97".
    """
    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.operand))
        raise ValueError(f"not arithmetic: {expression!r}")

    try:
        result = value(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError) as err:
        return f"Error: {err}"
    return str(int(result)) if float(result).is_integer() else str(result)


def lookup(unit: str) -> str:
    """How many smaller units one unit holds.

    Args:
        unit: the unit to look up, e.g. "mile".
    """
    key = unit.strip().lower()
    key = "foot" if key == "feet" else key if key in FACTORS else key.rstrip("s")
    if key not in FACTORS:
        return f"Error: unknown unit {unit!r}"
    factor, smaller = FACTORS[key]
    return f"1 {key} = {factor} {smaller}"
