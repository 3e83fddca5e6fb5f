"""The ``tools`` config section: which tools, which parser, and how a conversation episode runs.

Registered as a section (``register_section``), so each field works as a recipe key (nested under
``tools:`` or flat), a ``--flag`` and a ``GROUPRL_<FIELD>`` variable, like every other field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grouprl.config import Section, register_section


class ToolsConfig(Section):
    episode_mode: Literal["window", "conversation"] = Field(
        "window", description="window = one prompt per step with a history window (rollout/runner.py); "
                              "conversation = one growing chat with tool calls (rollout/conversation.py)")
    tools: list[str] = Field(default_factory=list, description="conversation: tools by built-in name (calculator, "
                             "lookup, python) or 'path/to/file.py:function' / 'package.module:function'")
    tool_parser: str = Field("hermes", description="conversation: how tool calls are read from a turn: hermes "
                             "(<tool_call>{json}</tool_call>, Qwen), mistral ([TOOL_CALLS]), llama3_json")
    tool_chat_template: Literal["auto", "qwen25", "own"] = Field(
        "auto", description="conversation: auto = a ChatML template in Qwen2.5's tool format when the tokenizer's "
                            "template declares no tools; qwen25 = always; own = the tokenizer's as it is")
    max_tool_calls: int = Field(4, ge=0, description="conversation: tool calls per episode (malformed ones count); "
                                "a turn asking for more ends the episode")
    max_conversation_tokens: int | None = Field(
        None, gt=0, description="conversation: context cap; the episode ends when the next prompt plus "
                                "max_new_tokens would pass it (empty = no cap)")
    tool_timeout: float = Field(10.0, gt=0, description="conversation: seconds per tool call (an overrun is an "
                                "error message to the model, counted)")
    tool_sandbox: bool = Field(False, description="conversation: run user tools named by a file in the bubblewrap "
                               "sandbox (the python tool always runs there)")
    tool_anchor: Literal["tool_state", "turn"] = Field(
        "tool_state", description="conversation: GiGPO anchor state of a turn: the set of (tool, normalised "
                                  "arguments, result) seen before it, or the turn index alone")


register_section("tools", ToolsConfig)
