"""What a ``grouprl generate`` run is asked to do (``GenerateSpec``: the CLI's flags), the flags' checks
before anything is read or sent (``check_spec``), and what the spec asks of the dataset: its rows
(``load_rows``) and each row's chat messages (``build_messages``). ``pipeline.py`` runs the requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from grouprl.config import ConfigError


@dataclass
class GenerateSpec:
    dataset: str
    model: str
    base_url: str
    output_dir: str
    dataset_config: str | None = None
    split: str = "train"
    prompt_column: str | None = "prompt"
    prompt_template: str | None = None  # Jinja over the row's columns, e.g. "Solve: {{ instruction }}"
    system_prompt: str | None = None
    num_generations: int = 1
    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 512
    concurrency: int = 8
    timeout: float = 120.0
    retries: int = 3
    backoff_seconds: float = 1.0
    api_key: str = "EMPTY"
    max_rows: int | None = None
    push_to_hub: str | None = None  # dataset repo id
    hub_endpoint: str | None = None
    hub_token: str | None = None
    progress: bool = True


def check_spec(spec: GenerateSpec) -> None:
    """Every flag in range before any row is read or request sent; ``ConfigError`` names the flag."""

    def bad(flag: str, value: Any, expected: str) -> ConfigError:
        return ConfigError(f"grouprl generate --{flag}: got {value!r}; expected {expected}")

    url = urlparse(spec.base_url)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise bad("base_url", spec.base_url, "an http(s) URL like http://127.0.0.1:8000/v1")
    for flag in ("model", "dataset", "output_dir"):
        if not str(getattr(spec, flag)).strip():
            raise bad(flag, getattr(spec, flag), "a non-empty value")
    for flag, low in (("num_generations", 1), ("max_new_tokens", 1), ("concurrency", 1), ("retries", 0)):
        if getattr(spec, flag) < low:
            raise bad(flag, getattr(spec, flag), f"a whole number >= {low}")
    if spec.max_rows is not None and spec.max_rows < 1:
        raise bad("max_rows", spec.max_rows, "a whole number >= 1 (or leave it out: every row)")
    for flag, ok, expected in (
        ("temperature", lambda v: 0 <= v, ">= 0"),
        ("top_p", lambda v: 0 < v <= 1, "in (0, 1]"),
        ("timeout", lambda v: v > 0, "> 0 seconds"),
        ("backoff_seconds", lambda v: v >= 0, ">= 0 seconds"),
    ):
        value = getattr(spec, flag)
        if not math.isfinite(value) or not ok(value):
            raise bad(flag, value, f"a number {expected}")
    out = Path(spec.output_dir)
    if out.exists() and not out.is_dir():
        raise bad("output_dir", spec.output_dir, "a folder (this is a file)")


def load_rows(spec: GenerateSpec) -> list[dict[str, Any]]:
    from grouprl.data.sources import FILE_BUILDERS, load_split

    path = Path(spec.dataset).expanduser()
    if not path.exists() and (spec.dataset.startswith((".", "/", "~")) or path.suffix.lower() in FILE_BUILDERS):
        raise ConfigError(
            f"grouprl generate --dataset: {spec.dataset} does not exist; expected a data file "
            f"({', '.join(sorted(FILE_BUILDERS))}), a dataset dir or a hub id"
        )
    try:
        rows = list(load_split(spec.dataset, spec.dataset_config, spec.split))
    except ValueError as err:  # the source names the file, the split or the row
        raise ConfigError(f"grouprl generate --dataset: {err}") from None
    rows = rows[: spec.max_rows] if spec.max_rows else rows
    if not rows:
        raise ConfigError(
            f"grouprl generate --dataset: {spec.dataset} split {spec.split!r} has no rows; expected at least one"
        )
    return rows


def build_messages(spec: GenerateSpec, row: dict[str, Any], index: int) -> list[dict[str, str]]:
    """The request's chat messages for one row; ``ConfigError`` names the row and what is wrong with it."""
    from grouprl.data.prompt_rows import prompt_messages

    if spec.prompt_template:
        import jinja2

        try:
            value: Any = (
                jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(spec.prompt_template).render(**row)
            )
        except Exception as err:  # noqa: BLE001 - a template is code: any error of it is the template's
            raise ConfigError(
                f"grouprl generate --prompt_template on {spec.dataset} row {index}: "
                f"{type(err).__name__}: {err}; the row has {sorted(row)}"
            ) from None
    else:
        if spec.prompt_column not in row:
            raise ConfigError(
                f"{spec.dataset} row {index}: no prompt column {spec.prompt_column!r}; "
                f"it has {sorted(row)} (or give --prompt_template)"
            )
        value = row[spec.prompt_column]
    try:
        return prompt_messages(value, spec.system_prompt)
    except ValueError as err:
        raise ConfigError(f"{spec.dataset} row {index}: {err}") from None
