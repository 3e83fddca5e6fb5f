"""Chat messages to prompt token ids: the recipe's chat template, its kwargs, and left truncation.

``chat_template`` replaces the tokenizer's template (a Jinja string, or a path to a file holding
one); ``chat_template_kwargs`` reach ``apply_chat_template`` (e.g. ``enable_thinking: false``);
``max_prompt_length`` keeps the *last* N prompt tokens (left truncation, as TRL does: the end of
the prompt, where the question and the generation prompt sit, matters most). Every truncated
prompt is counted (the metric ``prompts/truncated``), and the first one is warned about.
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


def check_chat_template(value: str | None, kwargs: dict[str, Any] | None = None) -> None:
    """Refuse a template that cannot render a conversation (before any model loads): a file that is not
    UTF-8 text, a Jinja syntax error, an unknown filter or test, an undefined name, ``raise_exception``
    on a plain user turn, or nothing rendered. ``ConfigError`` names the file or the inline text."""
    from grouprl.config import ConfigError

    if not value:
        return
    inline = "{" in value or len(value) >= 4096
    where = "the inline template" if inline else value
    try:
        template = resolve_chat_template(value)
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"config key 'chat_template': {where} is not UTF-8 text (byte {err.object[err.start]:#04x} "
            f"at offset {err.start}); expected a Jinja chat template"
        ) from None
    except (FileNotFoundError, IsADirectoryError, PermissionError) as err:
        raise ConfigError(f"config key 'chat_template': {err}") from None
    from transformers.utils.chat_template_utils import render_jinja_template

    conversation = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "3+3?"},
    ]
    rendered = None
    for messages in (conversation, conversation[1:2]):  # some templates refuse a system turn: a user turn must work
        try:
            # transformers annotates it -> str; it returns (rendered conversations, generation indices)
            rendered, _ = render_jinja_template(  # type: ignore[str-unpack]
                conversations=[messages],
                chat_template=template,
                add_generation_prompt=True,
                bos_token="",
                eos_token="",
                **(kwargs or {}),
            )
            if messages[-1]["content"] in rendered[0]:
                break
            failure, rendered = "the last user message is not in what it renders", None
        except Exception as err:  # noqa: BLE001 - a template is code: any error of its rendering is the template's
            lineno = getattr(err, "lineno", None)  # Jinja's syntax errors carry one
            line = f"line {lineno}: " if lineno else ""
            failure = f"{line}{type(err).__name__}: {err}".replace("\n", " ")
    if rendered is None:
        raise ConfigError(
            f"config key 'chat_template': {where} cannot render a conversation ({failure[:300]}); "
            "expected a Jinja chat template that writes each message's content ('messages': role, "
            "content)"
        )


def apply_chat_template(tokenizer, chat_template: str | None) -> None:
    """Install the recipe's template on the tokenizer (it is then saved with every checkpoint)."""
    template = resolve_chat_template(chat_template)
    if template:
        tokenizer.chat_template = template


_warned = False


def render_prompt_ids(
    tokenizer,
    messages: list[dict[str, str]],
    chat_template_kwargs: dict[str, Any] | None = None,
    max_prompt_length: int | None = None,
) -> tuple[str, list[int], bool]:
    """(prompt text, prompt token ids, truncated): the chat template with its kwargs, then the
    last ``max_prompt_length`` tokens. The first cut of a process is warned about; the runner
    marks every cut step (``Step.prompt_truncated``), so the metrics count them."""
    global _warned
    text = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False, **(chat_template_kwargs or {})
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not max_prompt_length or len(ids) <= max_prompt_length:
        return text, ids, False
    if not _warned:
        log.warning(
            "prompt of %d tokens cut to its last max_prompt_length=%d tokens (left truncation); further "
            "cuts are counted in the metric prompts/truncated",
            len(ids),
            max_prompt_length,
        )
        _warned = True
    ids = ids[-max_prompt_length:]
    return tokenizer.decode(ids), ids, True
