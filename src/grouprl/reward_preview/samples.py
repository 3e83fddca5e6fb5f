"""The samples file of ``grouprl rewards preview``: one sample a line, read into what the scorer sees.

Each line is ``{"messages": [..., {"role": "assistant", "content": ...}], "ground_truth": ...}`` or
``{"prompt": str | messages, "completion": str, "answer": ...}`` (``answer`` may be a full GSM8K answer field:
the gold number after ``####`` is taken), plus any other fields, passed to every reward as keyword arguments.
A malformed line is an entry naming the line and what was expected, not an exception.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grouprl.records import Episode, Step
from grouprl.rewards.builtin.gsm8k import extract_gold
from grouprl.rewards.kit import conversation

EXPECTED_FORMS = (
    '{"messages": [...], "ground_truth": ...} or {"prompt": str|messages, "completion": str, "answer": ...}'
)
_SAMPLE_KEYS = {"messages", "ground_truth", "prompt", "completion", "answer"}


class SampleError(ValueError):
    """A line of the samples file that is not a sample."""


def _check_messages(messages: Any, lineno: int, what: str) -> None:
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise SampleError(
            f'line {lineno}: \'{what}\' must be a list of {{"role", "content"}} objects; expected {EXPECTED_FORMS}'
        )


def parse_sample(obj: Any, lineno: int) -> dict[str, Any]:
    """``{messages, completion, ground_truth, extra}`` of one JSONL object, or ``SampleError``."""
    if not isinstance(obj, dict):
        raise SampleError(f"line {lineno}: expected a JSON object, got {type(obj).__name__}; expected {EXPECTED_FORMS}")
    extra = {k: v for k, v in obj.items() if k not in _SAMPLE_KEYS}
    if "messages" in obj:
        messages = obj["messages"]
        _check_messages(messages, lineno, "messages")
        if not messages or messages[-1].get("role") != "assistant":
            raise SampleError(
                f"line {lineno}: the last message must be the assistant's completion "
                f"(role 'assistant'); expected {EXPECTED_FORMS}"
            )
        completion = messages[-1].get("content") or ""
        truth = obj.get("ground_truth", obj.get("answer"))
    elif "completion" in obj:
        completion, prompt = obj["completion"], obj.get("prompt", "")
        if not isinstance(completion, str):
            raise SampleError(
                f"line {lineno}: 'completion' must be a string, got {type(completion).__name__}; "
                f"expected {EXPECTED_FORMS}"
            )
        if isinstance(prompt, list):
            _check_messages(prompt, lineno, "prompt")
        elif not isinstance(prompt, str):
            raise SampleError(
                f"line {lineno}: 'prompt' must be a string or a list of messages; expected {EXPECTED_FORMS}"
            )
        messages = conversation(prompt, completion)
        if "prompt" in obj:
            extra["prompt"] = prompt
        truth = obj.get("answer", obj.get("ground_truth"))
        if isinstance(truth, str) and "####" in truth:
            truth = extract_gold(truth) or truth
    else:
        raise SampleError(
            f"line {lineno}: no 'messages' or 'completion' field (keys: {sorted(obj)}); expected {EXPECTED_FORMS}"
        )
    if isinstance(truth, (int, float)) and not isinstance(truth, bool):
        truth = str(truth)
    return {"messages": messages, "completion": completion, "ground_truth": truth, "extra": extra}


def load_samples(samples_path: str | Path, max_samples: int | None = None) -> list[dict[str, Any]]:
    """One entry per non-blank line (up to ``max_samples``): a parsed sample, or ``{"error": ...}``."""
    path = Path(samples_path)
    if not path.is_file():
        raise FileNotFoundError(f"samples file not found: {path}")
    out: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if max_samples is not None and len(out) >= max_samples:
                break
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                out.append(
                    {
                        "line": lineno,
                        "error": f"line {lineno}: invalid JSON ({err.msg} at column "
                        f"{err.colno}); expected {EXPECTED_FORMS}",
                    }
                )
                continue
            try:
                out.append({"line": lineno, **parse_sample(obj, lineno)})
            except SampleError as err:
                out.append({"line": lineno, "error": str(err)})
    return out


def sample_episode(sample: dict[str, Any]) -> Episode:
    """A parsed sample as the one-step episode the scorer sees (each sample its own episode)."""
    step = Step(
        prompt_text="",
        prompt_ids=[],
        action_text=sample["completion"],
        action_ids=[],
        truncated=False,
        anchor_state=None,
        messages=sample["messages"][:-1],
    )
    return Episode(
        group_id=0, index_in_group=0, row={**sample["extra"], "ground_truth": sample["ground_truth"]}, steps=[step]
    )
