"""The registry both plug-in points of ``algos/`` share (advantage estimators, policy losses).

A function's signature is its declaration: each registry reads what it needs from it (``declare``)
and keeps the result under a name. Built-ins register with a decorator; a user's function is named
``path/to/file.py:function`` or ``package.module:function`` in a recipe and declared the same way
when first asked for, with no change to the package.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")


def check_options(kind: str, name: str, declared: tuple[str, ...], given: dict[str, Any]) -> None:
    """An option the function does not declare is an error naming it and what it takes."""
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise ValueError(
            f"{kind} '{name}': unknown option '{unknown[0]}'; it takes: {', '.join(declared) or 'no options'}"
        )


class Registry(Generic[T]):
    def __init__(self, kind: str, declare: Callable[[str, Callable[..., Any]], T]):
        self.kind, self.declare = kind, declare
        self.entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A decorator: add the function under ``name``, its declaration read from its signature."""

        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.entries[name] = self.declare(name, fn)
            return fn

        return wrap

    def get(self, name: str) -> T:
        """A built-in by name, or a user's function named ``path/to/file.py:function`` / ``module:function``."""
        if name in self.entries:
            return self.entries[name]
        if ":" in name:
            from grouprl.user_code import import_callable

            return self.declare(name, import_callable(name, self.kind))
        raise KeyError(
            f"unknown {self.kind} '{name}'; known: {sorted(self.entries)} or "
            "'path/to/file.py:function' or 'package.module:function'"
        )
