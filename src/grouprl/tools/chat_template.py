"""A ChatML chat template that declares tools, in Qwen2.5's published tool format.

The tiny model's template (``models/tiny.py``) and SmolLM2's have no tools section. This one keeps
their ChatML turns and adds what Qwen2.5's format defines: the tool signatures as JSON lines inside
``<tools></tools>`` in the system turn, with how to call them; an assistant's calls as
``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks; tool results as a user turn
holding one ``<tool_response>`` block per result (consecutive results share the turn). The wording of
the instructions is ours; the layout is the format's, so a model trained on it (Qwen2.5) reads it
as its own and the ``hermes`` parser reads the calls.
"""

from __future__ import annotations

# transformers renders templates with trim_blocks: a newline right after a tag is dropped, so every
# newline that follows a tag is written as an expression ({{ '\n' }}).
TOOL_CHAT_TEMPLATE = (
    "{% if tools %}"
    "<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% else %}You are a helpful assistant."
    "{% endif %}{{ '\n\n# Tools\n\nYou can call these functions; their signatures are inside <tools></tools>:"
    "\n<tools>' }}"
    "{% for tool in tools %}{{ '\n' }}{{ tool | tojson }}{% endfor %}"
    "{{ '\n</tools>\n\nTo call one, reply with its name and arguments as a JSON object inside "
    '<tool_call></tool_call> tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
    "\n</tool_call><|im_end|>\n' }}"
    "{% elif messages[0]['role'] == 'system' %}"
    "<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>{{ '\n' }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\n<tool_response>\n' }}{{ message['content'] }}{{ '\n</tool_response>' }}"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>{{ '\n' }}{% endif %}"
    "{% elif message['role'] == 'assistant' and message.get('tool_calls') %}"
    "<|im_start|>assistant{% if message['content'] %}{{ '\n' }}{{ message['content'] }}{% endif %}"
    "{% for call in message['tool_calls'] %}{% set call = call.get('function', call) %}"
    "{{ '\n<tool_call>\n{\"name\": \"' }}{{ call['name'] }}{{ '\", \"arguments\": ' }}"
    "{{ call['arguments'] | tojson }}{{ '}\n</tool_call>' }}"
    "{% endfor %}<|im_end|>{{ '\n' }}"
    "{% elif message['role'] != 'system' or not loop.first %}"
    "<|im_start|>{{ message['role'] }}{{ '\n' }}{{ message['content'] }}<|im_end|>{{ '\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{{ '\n' }}{% endif %}"
)


def declares_tools(template: str | None) -> bool:
    """Whether a chat template renders a ``tools`` argument at all (a template that ignores it would
    hide the tools from the model)."""
    return template is not None and "tools" in template


def ensure_tool_template(tokenizer, choice: str = "auto") -> None:
    """Give a ChatML tokenizer whose template has no tools section this module's template.

    ``choice``: ``auto`` (only when the tokenizer's template does not declare tools), ``qwen25``
    (always) or ``own`` (never: the tokenizer's template is used as it is).
    """
    if choice == "own" or (choice == "auto" and declares_tools(tokenizer.chat_template)):
        return
    if choice not in ("auto", "qwen25"):
        raise ValueError(f"config key 'tool_chat_template': got {choice!r}; expected auto, qwen25 or own")
    vocab = tokenizer.get_vocab()
    if "<|im_start|>" not in vocab or "<|im_end|>" not in vocab:
        raise ValueError(
            "config key 'tool_chat_template': the tokenizer's chat template declares no tools and it "
            "is not ChatML (no <|im_start|>/<|im_end|> tokens); give it a template with a tools "
            "section or set tool_chat_template: own"
        )
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
