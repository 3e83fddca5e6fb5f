"""The keyword a model takes its KV cache under: ``cache`` (transformers >= 5.24, which deprecates
``past_key_values`` with a FutureWarning on every call) or ``past_key_values`` (older releases, the vLLM
venv's). Asked of the model's own forward signature, so both work without a warning."""

from __future__ import annotations

import functools
import inspect
from typing import Any


def cache_keyword(model) -> str:
    """``"cache"`` where ``model``'s forward (and so its ``generate``) takes it, else ``"past_key_values"``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft wrapper: its model
    model_class: Any = type(base)
    return _keyword_of(model_class)


@functools.lru_cache(maxsize=64)
def _keyword_of(model_class: Any) -> str:
    try:
        parameters = inspect.signature(model_class.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"
