"""Literal data a test's helper holds, cut down to what one side reads (for ``assert_split._child_data``).

A helper the probes need runs with the solution, where all it holds is visible; so a literal like
``CASE = {"inp": ..., "out": ...}`` read there only as ``CASE["inp"]`` crosses as ``{"inp": ...}``.
This module finds the subscript paths by which code reads a name (``read_paths``), evaluates a literal
(``literal``, ``NOT_LITERAL`` for anything else), prunes a value to given paths (``prune``) and checks
that the pruned value survives ``repr`` (``round_trips``).
"""

from __future__ import annotations

import ast
from typing import Any, Iterable

NOT_LITERAL = object()
_EVAL_ERRORS = (ValueError, TypeError, SyntaxError, MemoryError, RecursionError)


def read_paths(trees: list[ast.AST], name: str) -> set[tuple]:
    """The subscript paths by which ``trees`` read ``name``: ``CASE["inp"]`` is ``("inp",)``, a read
    of the whole value is ``()``, a computed index is ``None`` (``CASES[i][0]``: ``(None, 0)``)."""
    paths: set[tuple] = set()
    for tree in trees:
        parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                path: list[int | str | bytes | float | None] = []
                cur: ast.AST = node
                while isinstance(up := parent.get(cur), ast.Subscript) and up.value is cur:
                    cur = up
                    key = literal(up.slice)
                    path.append(key if isinstance(key, (int, str, bytes, float)) else None)
                paths.add(tuple(path))
    return paths


def prune(value, paths: set[tuple]):
    """``value`` with only what ``paths`` read (other dict keys dropped, other items None), or
    ``NOT_LITERAL`` where it cannot be cut down so (a string read by index, say)."""
    if () in paths:
        return value
    out: object  # the pruned dict, list or tuple; items: its values
    items: Iterable[Any]
    if isinstance(value, dict):
        parts = {
            k: prune(v, {p[1:] for p in paths if p[0] is None or p[0] == k})
            for k, v in value.items()
            if any(p[0] is None or p[0] == k for p in paths)
        }
        out, items = parts, parts.values()
    elif isinstance(value, (list, tuple)) and all(p[0] is None or type(p[0]) is int for p in paths):
        kept = [{p[1:] for p in paths if p[0] is None or p[0] in (i, i - len(value))} for i in range(len(value))]
        out = items = type(value)(prune(v, k) if k else None for v, k in zip(value, kept))
    else:
        return NOT_LITERAL
    return NOT_LITERAL if any(x is NOT_LITERAL for x in items) else out


def literal(node):  # a literal's value, or NOT_LITERAL
    try:
        return ast.literal_eval(node)
    except _EVAL_ERRORS:
        return NOT_LITERAL


def round_trips(value) -> bool:
    try:
        return literal(repr(value)) == value
    except ValueError:  # an int too long for repr
        return False
