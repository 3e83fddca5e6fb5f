"""The ``grouprl generate`` sub-command: flags onto :class:`GenerateSpec`, a one-line summary."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from grouprl.generate.pipeline import GenerationFailed, generate
from grouprl.generate.spec import GenerateSpec

HELP = {
    "dataset": "hub id, local dir or data file (.jsonl/.json/.parquet/.csv)",
    "model": "model name the server serves",
    "base_url": "OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1",
    "output_dir": "where requests.jsonl, generations.jsonl and dataset/ go (rerun to resume)",
    "dataset_config": "hub dataset config",
    "split": "dataset split",
    "prompt_column": "column holding the prompt (a string or chat messages)",
    "prompt_template": "Jinja template over the row's columns instead, e.g. '{{ instruction }}'",
    "system_prompt": "system message before a string prompt",
    "num_generations": "completions per prompt (one request each)",
    "temperature": "sampling temperature",
    "top_p": "nucleus sampling",
    "max_new_tokens": "completion cap (max_tokens)",
    "concurrency": "requests in flight at most",
    "timeout": "seconds per request",
    "retries": "retries per request on connection errors, timeouts, 429 and 5xx (exponential backoff)",
    "backoff_seconds": "first retry delay; doubles each retry",
    "api_key": "API key (servers on 127.0.0.1 usually take any)",
    "max_rows": "only the first N rows",
    "push_to_hub": "dataset repo id to push generations.jsonl to (private)",
    "hub_endpoint": "hub URL (default HF_ENDPOINT or huggingface.co)",
    "hub_token": "hub token (default the logged-in one)",
    "progress": "show the progress bar",
}
REQUIRED = ("dataset", "model", "base_url", "output_dir")


def add_generate_parser(sub) -> argparse.ArgumentParser:
    gen = sub.add_parser(
        "generate",
        help="completions for a dataset from an OpenAI-compatible server (resumable)",
        description="Query an OpenAI-compatible endpoint for every row of a dataset; a rerun "
        "of the same command skips requests already written.",
    )
    for field in dataclasses.fields(GenerateSpec):
        kind = {"int": int, "float": float, "bool": None}.get(str(field.type).split(" ")[0], str)
        if field.name in REQUIRED:
            gen.add_argument(f"--{field.name}", required=True, help=f"{HELP[field.name]} (required)")
        elif kind is None:
            gen.add_argument(
                f"--{field.name}",
                default=field.default,
                action=argparse.BooleanOptionalAction,
                help=f"{HELP[field.name]} (default: {field.default})",
            )
        else:
            gen.add_argument(
                f"--{field.name}",
                default=field.default,
                type=kind,
                help=f"{HELP[field.name]} (default: {field.default})",
            )
    gen.set_defaults(func=cmd_generate)
    return gen


def cmd_generate(args: argparse.Namespace) -> int:
    spec = GenerateSpec(**{f.name: getattr(args, f.name) for f in dataclasses.fields(GenerateSpec)})
    try:
        result = generate(spec)
    except GenerationFailed as err:
        print(f"grouprl generate: {err}", file=sys.stderr)
        return 1
    print(json.dumps(dataclasses.asdict(result)))
    return 0
