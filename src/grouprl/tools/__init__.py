"""Tools the policy calls through its chat template: schemas, built-ins, parsers and execution.

See docs/agents.md ("Tools"). The conversation episode runner that uses them is
``rollout/conversation.py``.
"""

from grouprl.tools.execution import ERROR_KINDS, INVALID_KINDS, ToolOutcome, ToolSession
from grouprl.tools.parsers import PARSERS, ParsedTurn, ToolCall, get_parser, parse_turn
from grouprl.tools.registry import TOOLS, resolve_tool, resolve_tools
from grouprl.tools.schema import Tool, ToolArgumentError, make_tool, tool_schema

__all__ = [
    "TOOLS",
    "ERROR_KINDS",
    "INVALID_KINDS",
    "PARSERS",
    "ParsedTurn",
    "Tool",
    "ToolArgumentError",
    "ToolCall",
    "ToolOutcome",
    "ToolSession",
    "get_parser",
    "make_tool",
    "parse_turn",
    "resolve_tool",
    "resolve_tools",
    "tool_schema",
]
