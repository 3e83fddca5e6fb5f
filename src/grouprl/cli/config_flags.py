"""The config fields as ``grouprl train``'s options: one ``--field`` per field, grouped by section, the same
lines in the top-level ``--help``, and the values given read back into a config (``run_config.build_config``)."""

from __future__ import annotations

import argparse
from typing import Any, get_args, get_origin

from grouprl.config import SECTIONS, ConfigError, parse_value
from grouprl.run_config import build_config


def option_help(field) -> str:
    """A config field as an option's help: its description, then its default."""
    default = field.default_factory() if field.default_factory else field.default
    return f"{field.description} (default: {default})"


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--field`` per config field, grouped by section, with the default in the help."""
    parser.add_argument("--config", default=None, help="YAML recipe (default: None)")
    for section, cls in SECTIONS.items():
        group = parser.add_argument_group(f"{section} options")
        for name, field in cls.model_fields.items():
            is_list = get_origin(field.annotation) is list or any(
                get_origin(a) is list for a in get_args(field.annotation)
            )
            group.add_argument(
                f"--{name}",
                dest=name,
                default=argparse.SUPPRESS,
                nargs="+" if is_list else None,
                type=str,
                metavar=name.upper(),
                help=option_help(field),
            )


def config_fields_help() -> str:
    """Every config field with its default, for the top-level ``--help``."""
    lines = ["config fields (grouprl train --FIELD VALUE; defaults < --config < env vars < flags):"]
    for section, cls in SECTIONS.items():
        lines.append(f"  {section}:")
        lines += [f"    --{name}  {option_help(field)}" for name, field in cls.model_fields.items()]
    return "\n".join(lines)


def config_from_args(args: argparse.Namespace, job: dict[str, Any] | None = None):
    """The config of the options given (only those given: the others keep the lower layers' values)."""
    cli: dict[str, Any] = {}
    for section_cls in SECTIONS.values():
        for name in section_cls.model_fields:
            if hasattr(args, name):
                raw = getattr(args, name)
                cli[name] = [parse_value(v) for v in raw] if isinstance(raw, list) else parse_value(raw)
    return build_config(args.config, cli, job=job)


def built_in_job(args: argparse.Namespace) -> dict[str, Any] | None:
    """The built-in job ``grouprl train`` starts from (``config/main_job.py``): ``--model NAME``, else the
    real-model main job when nothing else is chosen; a recipe, a model or a task given without
    ``--model`` starts from the field defaults (the tiny job), as it always did."""
    from grouprl.config import env_overrides
    from grouprl.config.main_job import MAIN_JOBS, MAIN_MODEL

    if args.model is not None:
        if args.config:
            raise ConfigError(
                f"--model {args.model} picks a built-in job; with --config RECIPE, name the model "
                "in the recipe or with --model_name_or_path"
            )
        return MAIN_JOBS[args.model]
    chosen = {name for name in ("model_name_or_path", "task") if hasattr(args, name)}
    chosen |= {key for section in env_overrides().values() for key in section} & {"model_name_or_path", "task"}
    return None if args.config or chosen else MAIN_JOBS[MAIN_MODEL]
