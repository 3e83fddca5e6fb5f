"""The one plug-in table: every part a recipe names is found here the same way.

Eight tables are instances of :class:`Registry`: advantage estimators (``algos/advantages.py``),
policy losses (``algos/policy_losses.py``), sampling corrections (``algos/importance.py``), rewards
(``rewards/registry.py``), tool-call parsers (``tools/parsers.py``), built-in tools
(``tools/registry.py``), tasks (``tasks/registry.py``) and generation backends (``rollout/generation.py``).

A name is resolved one way everywhere (:meth:`Registry.resolve`): a registered name, or user code named
``path/to/file.py:function`` or ``package.module:function`` (read by ``user_code.code_ref``, imported by
``user_code.import_callable``) and declared like a built-in. A name that is neither is one error
(:class:`UnknownName`: the kind, the name given, the known names). A function's signature is its
declaration: each table's ``declare(name, fn, **declaration)`` reads what it needs from it, its keyword
parameters are its options, and an option it does not declare is an error naming it (:func:`check_options`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, TypeVar

from grouprl.user_code import CodeRef, code_ref, import_callable

log = logging.getLogger(__name__)

T = TypeVar("T")


class UnknownName(KeyError, ValueError):
    """A name no table knows (a ``KeyError``, and a ``ValueError`` for callers that check values)."""

    def __str__(self) -> str:  # the message as written, not KeyError's repr of it
        return str(self.args[0])


def check_options(kind: str, name: str, declared: tuple[str, ...], given: dict[str, Any]) -> None:
    """An option the function does not declare is an error naming it and what it takes."""
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise ValueError(
            f"{kind} '{name}': unknown option '{unknown[0]}'; it takes: {', '.join(declared) or 'no options'}"
        )


def options_from_config(
    section: Any, fields: dict[str, str], declared: tuple[str, ...], kind: str, name: str, only_set: bool = False
) -> dict[str, Any]:
    """A plug-in's options read from its config section: ``fields`` maps an option to the section's field that
    sets it; only the options the plug-in declares are read (``only_set``: and only fields the user set). A
    field the user set for a plug-in that does not declare it is warned about, never dropped silently."""
    options = {
        option: getattr(section, field)
        for option, field in fields.items()
        if option in declared and (not only_set or field in section.model_fields_set)
    }
    ignored = [
        field for option, field in fields.items() if field in section.model_fields_set and option not in declared
    ]
    if ignored:
        log.warning(
            "%s '%s' does not use %s (it takes: %s)",
            kind,
            name,
            ", ".join(ignored),
            ", ".join(declared) or "no options",
        )
    return options


def _as_is(name: str, fn: Callable[..., Any]) -> Any:
    return fn


class Registry(MutableMapping[str, T]):
    """Name -> entry (what ``declare`` made of a function), and the one lookup of a name or user code.

    ``config_key``: the config field that names an entry of this table (``run_config.check_names``
    checks it); ``takes_code``: whether user code may be named at all (False: built-ins only);
    ``load``: how user code becomes an entry, when not "import it now and declare it" (a task from a
    file is imported when it is built, not when its name is checked); ``code_form``: the function's
    role in the hint of the unknown-name error (``make_task``).
    """

    def __init__(
        self,
        kind: str,
        declare: Callable[..., T] = _as_is,
        *,
        config_key: str | None = None,
        takes_code: bool = True,
        load: Callable[[str, CodeRef], T] | None = None,
        code_form: str = "function",
    ):
        self.kind, self.declare, self.config_key = kind, declare, config_key
        self.takes_code, self.code_form = takes_code, code_form
        self._load = load or self._import_and_declare
        self._entries: dict[str, T] = {}

    # the mapping of built-ins: REGISTRY[name], REGISTRY[name] = entry, del, iteration, len
    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __setitem__(self, name: str, entry: T) -> None:
        self._entries[name] = entry

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(sorted(self._entries))})"

    def register(self, name: str, **declaration: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A decorator: add the function under ``name``, declared from its signature (and ``declaration``)."""

        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            self._entries[name] = self.declare(name, fn, **declaration)
            return fn

        return wrap

    def resolve(self, name: str) -> T:
        """A built-in by name, or a user's function named ``path/to/file.py:function`` / ``module:function``."""
        if name in self._entries:
            return self._entries[name]
        ref = code_ref(name) if self.takes_code else None
        if ref is None:
            raise self.unknown(name)
        return self._load(name, ref)

    def check(self, name: str) -> None:
        """:meth:`resolve` would find ``name`` (or try user code); nothing is imported."""
        if name not in self._entries and not (self.takes_code and code_ref(name)):
            raise self.unknown(name)

    def unknown(self, name: str) -> UnknownName:
        """The one unknown-name error: the kind, the name given, the known names (and the user-code forms)."""
        own = self.code_form
        code = f", or 'path/to/file.py:{own}' / 'package.module:{own}'" if self.takes_code else ""
        return UnknownName(f"unknown {self.kind} '{name}'; known: {', '.join(map(repr, sorted(self._entries)))}{code}")

    def _import_and_declare(self, name: str, ref: CodeRef) -> T:
        return self.declare(name, import_callable(name, self.kind))
