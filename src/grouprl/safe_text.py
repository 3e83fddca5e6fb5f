"""Text that the policy or a server controls, made safe to decode, tokenize and log.

Two rules, used wherever such text is read (tool-call parsers, judge replies, HTTP answers) or written
(JSONL logs, the judge cache):

* :func:`safe_json_loads` is the one JSON decoder for untrusted text. Python's ``json`` turns bad input
  into four different failures besides ``JSONDecodeError``: ``RecursionError`` (``[[[[...`` deeper than
  the interpreter's stack), ``ValueError`` (an integer of more than 4300 digits, Python's
  ``int_max_str_digits``), a value with a lone surrogate (``"\\ud800"`` decodes to a ``str`` that
  cannot be UTF-8 encoded, so the tokenizer or a log writer fails later, far from the cause) and
  non-finite numbers (``NaN``, ``Infinity``, ``1e999``, which no JSON writer can write back). Each is
  returned here as a :class:`JsonRejected` with one line saying why, never raised. Values nested
  deeper than :data:`MAX_DEPTH` are refused as well: code that walks a decoded value recursively
  (argument normalisation, ``json.dumps``) would otherwise fail on them.
* :func:`encodable` returns text that UTF-8 can encode (a lone surrogate becomes U+FFFD), for text
  that did not come through the decoder (a tool's return value, a decoded HTTP body) on its way to a
  tokenizer or a file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 64  # nesting a tool call or a judge's verdict never needs; far below the interpreter's stack


@dataclass(frozen=True)
class JsonRejected:
    """Why a text is not acceptable JSON (one line, with the position where the decoder knows it)."""

    reason: str

    def __bool__(self) -> bool:  # so ``if rejected:`` reads naturally next to a value
        return True


def _no_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is not finite")
    return value


def _check_value(value: Any) -> str | None:
    """Why a decoded value is unsafe (too deep, a string or key that UTF-8 cannot encode), or None.
    Iterative: the walk itself must not be what overflows the stack."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not is_encodable(item):
                return f"a string that UTF-8 cannot encode (a lone surrogate escape): {encodable(item)[:40]!r}"
        elif isinstance(item, (list, dict)):
            if depth > MAX_DEPTH:
                return f"nested deeper than {MAX_DEPTH} levels"
            children = list(item.items()) if isinstance(item, dict) else [(None, v) for v in item]
            for key, child in children:
                if key is not None and not is_encodable(key):
                    return f"a key that UTF-8 cannot encode (a lone surrogate escape): {encodable(key)[:40]!r}"
                stack.append((child, depth + 1))
    return None


def safe_json_loads(text: str | bytes, *, prefix: bool = False) -> Any:
    """The decoded value, or a :class:`JsonRejected` saying why ``text`` is not safe JSON.

    ``prefix=True`` decodes the value at the start of ``text`` (after whitespace) and ignores what
    follows, as ``json.JSONDecoder.raw_decode`` does; the result is then ``(value, end)``."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            return JsonRejected(f"not UTF-8 ({err.reason} at byte {err.start})")
    decoder = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)
    try:
        if prefix:
            stripped = text.lstrip()
            value, end = decoder.raw_decode(stripped)
            end += len(text) - len(stripped)
        else:
            value, end = decoder.decode(text), len(text)
    except json.JSONDecodeError as err:
        return JsonRejected(f"not valid JSON ({err.msg} at character {err.pos})")
    except RecursionError:
        return JsonRejected(f"nested deeper than {MAX_DEPTH} levels")
    except ValueError as err:  # int_max_str_digits, non-finite numbers
        return JsonRejected(f"not acceptable JSON ({str(err).splitlines()[0][:120]})")
    why = _check_value(value)
    if why is not None:
        return JsonRejected(why)
    return (value, end) if prefix else value


def is_encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encodable(text: str) -> str:
    """``text`` with every character UTF-8 cannot encode (lone surrogates) replaced by U+FFFD."""
    if is_encodable(text):
        return text
    return "".join(ch if is_encodable(ch) else "\ufffd" for ch in text)
