"""GSM8K (openai/gsm8k, config ``main``) from the hub or a local dir of train/test JSONL."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from grouprl.config import Config
from grouprl.data.sources import check_utf8
from grouprl.rewards.builtin.gsm8k import extract_final, extract_gold
from grouprl.tasks.base import SingleTurnTask
from grouprl.tasks.registry import register_task

SYSTEM_PROMPT = (
    "You are a helpful assistant. Solve the problem.\n"
    "Show your reasoning briefly.\n"
    "At the end, output exactly one line in this format:\n"
    "Final: <number>\n"
    "Do not write anything after the Final line."
)
HUB_ID = "openai/gsm8k"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    check_utf8(path)
    rows = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
    return rows


def load_split(source: str | None, split: str, config: str = "main") -> list[dict[str, Any]]:
    """Raw rows with ``question`` and ``answer``; ``source`` is a local dir or a hub id."""
    source = source or HUB_ID
    local = Path(source)
    if local.is_dir():
        path = local / f"{split}.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"gsm8k: expected {path} (a dir with train.jsonl and test.jsonl)")
        raw = _read_jsonl(path)
    else:
        from datasets import load_dataset

        raw = list(load_dataset(source, config, split=split))
    return [to_row(r, f"{source}:{split}", i) for i, r in enumerate(raw)]


def to_row(raw: dict[str, Any], where: str, index: int) -> dict[str, Any]:
    for key in ("question", "answer"):
        if not isinstance(raw.get(key), str):
            raise ValueError(f"gsm8k {where} row {index}: field '{key}' missing or not a string")
    gold = extract_gold(raw["answer"])
    if gold is None:
        raise ValueError(f"gsm8k {where} row {index}: no number after '#### ' in answer {raw['answer'][-40:]!r}")
    # Gold solution for SFT: the reasoning without calculator annotations, then the Final line.
    reasoning = raw["answer"].rsplit("####", 1)[0].strip()
    reasoning = _strip_calc(reasoning)
    return {"question": raw["question"], "ground_truth": gold, "gold_completion": f"{reasoning}\nFinal: {gold}"}


def _strip_calc(text: str) -> str:
    return re.sub(r"<<[^>]*>>", "", text)


@register_task("gsm8k", max_new_tokens=512)
def build_gsm8k(cfg: Config) -> SingleTurnTask:
    task_config = cfg.task
    train = load_split(task_config.dataset_name_or_path, "train", task_config.dataset_config)
    held_out = load_split(task_config.dataset_name_or_path, "test", task_config.dataset_config)
    if task_config.n_train:
        train = train[: task_config.n_train]
    system = SYSTEM_PROMPT if task_config.system_prompt is None else task_config.system_prompt
    return SingleTurnTask("gsm8k", train, held_out, system, ["gsm8k_final"], "gsm8k_final", predict=extract_final)
