"""Built-in tools: a calculator, a unit-conversion lookup, and the sandboxed ``python`` interpreter.

Each is a plain typed function with a docstring; its schema comes from them (``tools/schema.py``).
"""

from __future__ import annotations

# Exact integer conversion factors: the tool task's questions need them, and the model is not told them.
UNIT_FACTORS: dict[str, tuple[int, str]] = {
    "mile": (5280, "feet"),
    "yard": (36, "inches"),
    "foot": (12, "inches"),
    "day": (86400, "seconds"),
    "hour": (3600, "seconds"),
    "week": (168, "hours"),
    "gallon": (128, "fluid ounces"),
    "pound": (16, "ounces"),
    "ton": (2000, "pounds"),
    "kilometer": (1000, "meters"),
    "kilogram": (1000, "grams"),
    "year": (365, "days"),
}


def calculator(expression: str) -> str:
    """Evaluate arithmetic exactly.

    Args:
        expression: e.g. "4821 * 97"
    """
    from grouprl.tools.expression_eval import CalcError, safe_eval  # an AST walker, never eval

    try:
        value = safe_eval(expression)
    except CalcError as err:
        raise ValueError(str(err)) from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def lookup(unit: str) -> str:
    """How many smaller units one unit holds.

    Args:
        unit: e.g. "mile"
    """
    key = unit.strip().lower().rstrip("s") if unit.strip().lower() not in UNIT_FACTORS else unit.strip().lower()
    if key == "feet":
        key = "foot"
    if key not in UNIT_FACTORS:
        raise ValueError(f"unknown unit {unit!r}; known: {', '.join(sorted(UNIT_FACTORS))}")
    factor, smaller = UNIT_FACTORS[key]
    return f"1 {key} = {factor} {smaller}"
