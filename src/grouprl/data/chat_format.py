"""Chat messages to prompt token ids: the recipe's chat template, its kwargs, and left truncation.

``chat_template`` replaces the tokenizer's template (a Jinja string, or a path to a file holding
one); ``chat_template_kwargs`` reach ``apply_chat_template`` (e.g. ``enable_thinking: false``);
``max_prompt_length`` keeps the *last* N prompt tokens (left truncation, as TRL does: the end of
the prompt, where the question and the generation prompt sit, matters most). Every truncated
prompt is counted (the metric ``prompts/truncated``), and the first one is warned about.

Without ``max_prompt_length``, a prompt that leaves no room in the model's context for the completion is
refused (:class:`PromptTooLong`, one line naming the row, from the runner): it is never handed to the model,
which would try to build an attention mask for it (a 30 MB row asked for 900 TB). A prompt whose UTF-8 size
alone proves it too long (every token is at least one byte and at most the vocabulary's longest) is refused
before it is tokenized.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from grouprl.config import ConfigError

log = logging.getLogger(__name__)

UNBOUNDED = 10**8  # a tokenizer's model_max_length above this states no context (transformers' default is 1e30)


class PromptTooLong(ConfigError):
    """A prompt longer than the model's context leaves for the completion, with no ``max_prompt_length``."""


def prompt_room(tokenizer, max_new_tokens: int) -> int | None:
    """The longest prompt the model's context leaves room for (its ``model_max_length`` less the completion's
    cap), or None where the tokenizer states no context."""
    context = getattr(tokenizer, "model_max_length", None)
    if not isinstance(context, int) or context >= UNBOUNDED:
        return None
    return max(context - max_new_tokens, 1)


def _longest_token_bytes(tokenizer) -> int:
    cached = getattr(tokenizer, "_grouprl_longest_token_bytes", None)
    if cached is None:
        cached = max((len(t.encode("utf-8")) for t in tokenizer.get_vocab()), default=64)
        tokenizer._grouprl_longest_token_bytes = cached
    return cached


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
    room: int | None = None,
) -> tuple[str, list[int], bool]:
    """(prompt text, prompt token ids, truncated): the chat template with its kwargs, then the
    last ``max_prompt_length`` tokens. The first cut of a process is warned about; the runner
    marks every cut step (``Step.prompt_truncated``), so the metrics count them. ``room`` (see
    :func:`prompt_room`): without ``max_prompt_length``, a longer prompt raises :class:`PromptTooLong`."""
    global _warned
    text = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False, **(chat_template_kwargs or {})
    )
    if room and not max_prompt_length and len(text.encode("utf-8")) > room * _longest_token_bytes(tokenizer):
        raise PromptTooLong(f"a prompt of {len(text):,} characters, more than the model's context of {room:,} tokens")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if room and not max_prompt_length and len(ids) > room:
        raise PromptTooLong(f"a prompt of {len(ids):,} tokens, more than the {room:,} the model's context leaves")
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
