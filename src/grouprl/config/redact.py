"""Secrets never reach an artifact: the one redaction every writer of a config applies.

A recipe may carry credentials: a judge's ``api_key`` (``rewards: [{name: judge, options: {api_key:
...}}]``), a header in ``extra_body``, a hub token. The run's ``config.json``, the tracker configs
(W&B, trackio, TensorBoard), the dashboard's ``/api/runs`` and the offline report all show the config,
and all of them pass it through :func:`redact` first, so a key is written as :data:`REDACTED`. The
dashboard and the report redact again when they read a ``config.json`` (a folder written before this
rule, or by hand).

A field is a secret when its name, lower-cased with ``-`` as ``_``, is or ends with one of
:data:`SECRET_NAMES` (``api_key``, ``openai_api_key``, ``hub_token``, ``client_secret``, ``Authorization``;
not ``max_new_tokens`` or ``tokenizer``), or when a string value starts like a bearer credential
(``Bearer ...``). A config read back with a redacted key (``grouprl train --config run/config.json``)
does not send the mark: the judge falls back on ``$OPENAI_API_KEY`` or stops with one line.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"
SECRET_NAMES = (
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "secret_key",
    "secret",
    "password",
    "passwd",
    "token",
    "auth_token",
    "access_token",
    "hf_token",
    "hub_token",
    "credential",
    "credentials",
    "authorization",
    "bearer",
    "cookie",
)
_SECRET_NAME = re.compile(r"(?:^|_)(?:" + "|".join(SECRET_NAMES) + r")$")
_SECRET_VALUE = re.compile(r"^\s*(?:bearer|basic)\s+\S", re.I)


def is_secret_name(name: Any) -> bool:
    return isinstance(name, str) and _SECRET_NAME.search(name.lower().replace("-", "_")) is not None


def redact(value: Any, _depth: int = 0) -> Any:
    """A copy of ``value`` (dicts, lists, scalars) with every secret field's value replaced by ``REDACTED``."""
    if _depth > 64:  # a config is never this deep; a cycle or a hostile file is not walked further
        return REDACTED
    if isinstance(value, dict):
        return {
            k: (REDACTED if is_secret_name(k) and v not in (None, "") else redact(v, _depth + 1))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(v, _depth + 1) for v in value]
    if isinstance(value, str) and _SECRET_VALUE.match(value):
        return REDACTED
    return value


_INLINE_SECRET = re.compile(
    r"((?:^|[\s{,\"'])[\w-]*(?:" + "|".join(SECRET_NAMES) + r")[\"']?\s*[:=]\s*[\"']?)([^\s,}\"']+)", re.I
)


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with secrets replaced: the value after a secret flag (``--api_key X``, ``--hub_token=X``)
    and inline ``api_key: X`` / ``"token": "X"`` inside a flag's YAML or JSON value. For trackers that record
    the command line (W&B's run metadata)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        name, eq, _ = arg.partition("=")
        if hide_next:
            out.append(REDACTED)
        elif arg.startswith("-") and is_secret_name(name.lstrip("-")):
            out.append(f"{name}={REDACTED}" if eq else arg)
        else:
            out.append(_INLINE_SECRET.sub(lambda m: m.group(1) + REDACTED, arg))
        hide_next = arg.startswith("-") and not eq and is_secret_name(arg.lstrip("-"))
    return out
