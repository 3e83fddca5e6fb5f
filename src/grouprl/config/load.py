"""Reading a config: defaults < YAML recipe (``--config``) < environment variables < flags.

Every field name is unique across sections, so a flag is just ``--field_name`` (as in TRL) and a
recipe may be nested by section or flat. Unknown keys and bad values fail here, before any model
loads, in one line that names the key, what was found and what was expected. Names that a
registry resolves (task, backend, estimator, loss, reward) are checked where the run is assembled
(``grouprl/run_config.py``), not here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from grouprl.config.base import ConfigError, parse_value
from grouprl.config.model import EXTRA_SECTIONS, FIELD_SECTION, SECTIONS, Config
from grouprl.config.openr1 import translate_recipe
from grouprl.config.redact import redact

# The seed script's environment variables (simple_grpo), then every section's declared aliases
# (GRAIL's GAIL_USE, ...); any field is also GROUPRL_<FIELD>.
SEED_ENV_VARS: dict[str, str] = {
    "MODEL_NAME": "model_name_or_path",
    "OUTPUT_DIR": "output_dir",
    "MAX_STEPS": "max_steps",
    "NUM_GENERATIONS": "num_generations",
    "MAX_NEW_TOKENS": "max_new_tokens",
    "BATCH_SIZE": "batch_size",
    "GRAD_ACCUM": "gradient_accumulation_steps",
    "LR": "learning_rate",
    "N_TRAIN": "n_train",
    "N_EVAL": "n_eval",
    "SEED": "seed",
}


def env_vars() -> dict[str, str]:
    """Every environment variable that sets a field (besides GROUPRL_<FIELD>): variable -> field."""
    table = dict(SEED_ENV_VARS)
    for cls in SECTIONS.values():
        table.update(cls.env_aliases)
    return table


ENV_VARS: dict[str, str] = env_vars()  # the built-in sections' table (a registered section adds its own)

# GROUPRL_* variables that are not config fields: read by other parts of grouprl (the model cache, the
# dashboard's request log, the sandbox's uid locks, the SLURM scripts' venv), so never a config key.
RESERVED_ENV_VARS: dict[str, str] = {
    "GROUPRL_CACHE": "the model cache folder (grouprl init-model)",
    "GROUPRL_DASHBOARD_LOG": "the dashboard's request log",
    "GROUPRL_SANDBOX_UID_LOCKS": "the sandbox's uid lock folder",
    "GROUPRL_VENV": "the virtualenv the SLURM scripts activate",
}


def _nest(flat: dict[str, Any], origin: str) -> dict[str, dict[str, Any]]:
    nested: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        if key not in FIELD_SECTION:
            raise ConfigError(
                f"{origin}: unknown key '{key}' (value {redact({key: value})[key]!r}); known keys: "
                f"{sorted(FIELD_SECTION)}"
            )
        nested.setdefault(FIELD_SECTION[key], {})[key] = value
    return nested


def _nests_under(section: str, key: str) -> bool:
    owner = FIELD_SECTION.get(key)
    return owner is not None and (owner == section or section in SECTIONS[owner].former_sections)


def _section_names() -> set[str]:
    return set(SECTIONS) | {old for cls in SECTIONS.values() for old in cls.former_sections}


def read_recipe(path: str | os.PathLike, environ: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Read a YAML recipe, nested by section (``train: {max_steps: 5}``) or flat (``max_steps: 5``).
    ``environ`` (default ``os.environ``): its ``WORLD_SIZE`` is the process count TRL's per-device keys need."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--config: no such recipe file '{p}'")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{p}: YAML syntax error{where}: {getattr(err, 'problem', None) or err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of sections or keys, got {type(data).__name__}")
    flat: dict[str, Any] = {}
    sections = _section_names()
    for key, value in data.items():
        if key in sections:
            if not isinstance(value, dict):
                raise ConfigError(f"{p}: section '{key}' must be a mapping, got {value!r}")
            for sub, subvalue in value.items():
                if not _nests_under(key, sub):
                    has = sorted(f for f in FIELD_SECTION if _nests_under(key, f))
                    raise ConfigError(
                        f"{p}: unknown key '{key}.{sub}' (value {redact({sub: subvalue})[sub]!r}); section '{key}' has: {has}"
                    )
                flat[sub] = subvalue
        else:
            flat[key] = value
    return _nest(translate_recipe(flat, FIELD_SECTION, str(p), environ), str(p))


def env_overrides(environ: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Seed variables (MODEL_NAME, LR, ...), declared aliases (GAIL_USE, ...) and GROUPRL_<FIELD>.
    Seed variables and aliases reach the field's type check as the text they are (pydantic reads
    "7", "1e-4", "0"/"1"); GROUPRL_<FIELD> is read like a flag (lists and nulls too). The variables
    in ``RESERVED_ENV_VARS`` (GROUPRL_CACHE, ...) belong to other parts of grouprl and are skipped."""
    environ = dict(os.environ if environ is None else environ)
    flat: dict[str, Any] = {}
    for var, field in env_vars().items():
        if environ.get(var, "") != "":
            flat[field] = environ[var]
    for var, value in environ.items():
        if var.startswith("GROUPRL_") and value != "" and var not in RESERVED_ENV_VARS:
            key = var[len("GROUPRL_") :].lower()
            if key not in FIELD_SECTION:
                raise ConfigError(f"environment variable {var}: unknown key '{key}' (value {value!r})")
            flat[key] = parse_value(value)
    return _nest(flat, "environment")


def _merge(base: dict[str, dict[str, Any]], over: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {k: dict(v) for k, v in base.items()}
    for section, values in over.items():
        out.setdefault(section, {}).update(values)
    return out


def load_config(
    recipe: str | os.PathLike | None = None,
    cli: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
    job: dict[str, Any] | None = None,
) -> Config:
    """Defaults < ``job`` (a built-in job's flat keys: what ``grouprl train`` runs with no recipe) <
    recipe < environment < CLI, validated as one typed model (names not resolved)."""
    merged: dict[str, dict[str, Any]] = {}
    for layer in (
        _nest(job or {}, "built-in job"),
        read_recipe(recipe, environ) if recipe else {},
        env_overrides(environ),
        _nest(cli or {}, "command line"),
    ):
        merged = _merge(merged, layer)
    for name, section_cls in EXTRA_SECTIONS.items():  # a registered section: its errors named like the others'
        try:
            merged[name] = section_cls.model_validate(merged.get(name, {}))  # type: ignore[assignment]
        except ValidationError as err:
            raise ConfigError(describe(err, name)) from None
    try:
        return Config.model_validate(merged)
    except ValidationError as err:
        raise ConfigError(describe(err)) from None


def describe(err: ValidationError, section: str | None = None) -> str:
    lines = []
    for e in err.errors():
        if not e["loc"]:  # a whole-config check: its message names the key itself
            lines.append(e["msg"].removeprefix("Value error, "))
            continue
        loc = ([section] if section else []) + [str(x) for x in e["loc"]]
        key = loc[1] if len(loc) > 1 else loc[0]
        value = e.get("input")
        shown = redact({key: value})[key]  # an error line may end up in a log: no key in clear
        lines.append(f"config key '{key}' (section {loc[0]}): got {shown!r}; expected {e['msg'].lower()}")
    return "invalid configuration:\n  " + "\n  ".join(lines)
