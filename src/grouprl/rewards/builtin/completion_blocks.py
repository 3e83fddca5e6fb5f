"""What the structured rewards read out of a completion: its fenced code blocks (found by a linear scan),
the JSON value it holds (the whole text or a fenced block, through the one safe decoder), the body of its
last python block, and a short one-line form of a text for reasons. Used by ``structured.py``,
``tool_call_compare.py`` and ``code_cases.py``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from grouprl.safe_text import JsonRejected, safe_json_loads

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)  # what _fenced_blocks finds
_LANG = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")
_PY_LANGS = {"python", "py", "python3"}


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block, in order. A linear scan with ``str.find``: the
    regex it replaces (``_FENCE``) took quadratic time on a run of backticks (100k: 38 s)."""
    text = text or ""
    blocks: list[tuple[str, str]] = []
    pos = 0
    while True:
        start = text.find("```", pos)
        eol = text.find("\n", start) if start >= 0 else -1
        end = text.find("```", eol + 1) if eol >= 0 else -1
        if end < 0:
            return blocks
        lang = _LANG.match(text, start + 3, eol)  # it always matches (perhaps nothing)
        blocks.append(((lang.group(1) if lang else "").lower(), text[eol + 1 : end]))
        pos = end + 3


def _policy_json(text: str) -> Any:
    """JSON the policy wrote, through the one safe decoder (safe_text): ``ValueError`` with its reason."""
    value = safe_json_loads(text)
    if isinstance(value, JsonRejected):
        raise ValueError(value.reason)
    return value


def extract_json(text: str) -> Any:
    """The JSON value of ``text``: the whole text, else the last ```json block, else the last
    unlabelled fenced block. Raises ``ValueError`` naming what was tried."""
    text = text or ""
    try:
        return _policy_json(text)
    except ValueError:
        pass
    blocks = _fenced_blocks(text)
    candidates = [b for lang, b in blocks if lang == "json"] or [b for lang, b in blocks if lang == ""]
    if not candidates:
        raise ValueError("completion is not JSON and has no ```json fenced block")
    try:
        return _policy_json(candidates[-1])
    except ValueError as err:
        raise ValueError(f"fenced JSON block does not parse: {str(err)[:120]}") from None


def extract_python_block(text: str) -> str | None:
    """The body of the last ```python (or ```py / ```python3) fenced block, else None."""
    blocks = [b for lang, b in _fenced_blocks(text) if lang in _PY_LANGS]
    return blocks[-1] if blocks else None


def maybe_json(value: Any) -> Any:
    """An option given as JSON text (a row's column) decoded; any other value as it is."""
    if isinstance(value, (str, bytes)):
        return json.loads(value)
    return value


def short_text(text: str, n: int = 200) -> str:
    """``text`` on one line (runs of whitespace as one space), cut to ``n`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."
