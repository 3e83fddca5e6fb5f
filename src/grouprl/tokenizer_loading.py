"""Loading a tokenizer from a folder as the policy does: on the ground floor, so that every room that reads
text with a model's tokenizer (``policy/`` for the policy, ``rewards/learned/`` for a judge's student)
gets the same ids for the same text."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast


def auto_tokenizer(path: str, revision: str | None = None) -> PreTrainedTokenizerBase:
    """AutoTokenizer, except for a plain ``tokenizer.json`` tokenizer such as the tiny model's
    character tokenizer: transformers 5 resolves that by the model type (qwen2 -> Qwen2Tokenizer),
    which rebuilds a byte-level BPE pipeline from the vocab and silently drops every space and
    newline of the input. ``revision`` (hub ids only) is the model's: a tokenizer from another
    revision than the weights would map the same text to other ids."""
    config = Path(path) / "tokenizer_config.json"
    if config.is_file():
        declared = json.loads(config.read_text()).get("tokenizer_class")
        if declared in ("TokenizersBackend", "PreTrainedTokenizerFast"):
            return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path, **({"revision": revision} if revision else {}))
