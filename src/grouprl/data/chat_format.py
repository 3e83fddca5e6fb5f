"""Chat messages to prompt token ids: the recipe's chat template, its kwargs, and left truncation.

``chat_template`` replaces the tokenizer's template (a Jinja string, or a path to a file holding
one); ``chat_template_kwargs`` reach ``apply_chat_template`` (e.g. ``enable_thinking: false``);
``max_prompt_length`` keeps the *last* N prompt tokens (left truncation, as TRL does: the end of
the prompt, where the question and the generation prompt sit, matters most). Every truncated
prompt is counted, and the first one is warned about.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def resolve_chat_template(value: str | None) -> str | None:
    """The template text: the file's content when ``value`` names an existing file, else ``value``."""
    if not value:
        return None
    if "{" not in value and len(value) < 4096:
        path = Path(value)
        if not path.is_file():
            raise FileNotFoundError(f"chat_template: {value!r} is neither a Jinja template nor an existing file")
        return path.read_text()
    return value


def apply_chat_template(tokenizer, chat_template: str | None) -> None:
    """Install the recipe's template on the tokenizer (it is then saved with every checkpoint)."""
    template = resolve_chat_template(chat_template)
    if template:
        tokenizer.chat_template = template


class PromptRenderer:
    """``render(messages) -> (text, ids)`` with the template kwargs and the length cap applied."""

    def __init__(self, tokenizer, chat_template_kwargs: dict[str, Any] | None = None,
                 max_prompt_length: int | None = None):
        self.tokenizer = tokenizer
        self.kwargs = dict(chat_template_kwargs or {})
        self.max_prompt_length = max_prompt_length
        self.rendered = 0
        self.truncated = 0

    def render(self, messages: list[dict[str, str]]) -> tuple[str, list[int]]:
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **self.kwargs)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        self.rendered += 1
        if self.max_prompt_length and len(ids) > self.max_prompt_length:
            if not self.truncated:
                log.warning("prompt of %d tokens cut to its last max_prompt_length=%d tokens (left truncation); "
                            "further cuts are counted in prompts_truncated", len(ids), self.max_prompt_length)
            self.truncated += 1
            ids = ids[-self.max_prompt_length:]
            text = self.tokenizer.decode(ids)
        return text, ids

    def counts(self) -> dict[str, float]:
        return {"prompts_rendered": float(self.rendered), "prompts_truncated": float(self.truncated)}
