"""A tool: a typed Python function whose docstring is its description, and its JSON schema.

The schema is what reaches the model (``apply_chat_template(..., tools=[schema, ...])``); it is
read from the function's type hints and its Google-style docstring by transformers'
``get_json_schema``, so a tool is written once, as a function::

    def convert(value: float, unit: str) -> str:
        '''Convert a value to metric units.

        Args:
            value: the amount to convert
            unit: the unit it is in, e.g. "mile"
        '''

Arguments the model sends are checked against the schema before the function runs: a missing
required argument, an argument the function does not take, or a value of the wrong JSON type is
refused with a message naming it (the model reads that message as the tool's answer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

# JSON schema type -> the Python values a JSON decoder produces for it.
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


class ToolArgumentError(ValueError):
    """Arguments that do not fit the tool's schema (the message is shown to the model)."""


@dataclass
class Tool:
    """A callable the model may call by ``name`` with JSON ``arguments``.

    ``sandboxed``: the call runs in the bubblewrap sandbox (``tools/sandboxed.py``), not in this
    process. ``stateful``: the tool keeps per-episode state (the ``python`` interpreter); it is
    called through a fresh :class:`~grouprl.tools.execution.ToolSession` per episode.
    """

    name: str
    fn: Callable[..., Any]
    schema: dict[str, Any]
    sandboxed: bool = False
    stateful: bool = False
    source: str = ""  # where it came from: "builtin" or "path/to/file.py:function"
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def parameters(self) -> dict[str, Any]:
        return self.schema["function"].get("parameters", {"type": "object", "properties": {}})

    def check_arguments(self, arguments: Any) -> dict[str, Any]:
        """The arguments, or :class:`ToolArgumentError` saying what is wrong with them."""
        if not isinstance(arguments, dict):
            raise ToolArgumentError(
                f"tool '{self.name}': arguments must be a JSON object, got {type(arguments).__name__}"
            )
        properties = self.parameters.get("properties", {})
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            raise ToolArgumentError(
                f"tool '{self.name}': unknown argument '{unknown[0]}'; it takes: "
                f"{', '.join(properties) or 'no arguments'}"
            )
        missing = [name for name in self.parameters.get("required", []) if name not in arguments]
        if missing:
            raise ToolArgumentError(f"tool '{self.name}': missing required argument '{missing[0]}'")
        for name, value in arguments.items():
            expected = properties[name].get("type")
            if expected is None:
                continue
            kinds = expected if isinstance(expected, list) else [expected]
            if properties[name].get("nullable"):  # Optional[...] hints
                kinds = kinds + ["null"]
            allowed = tuple(t for k in kinds for t in _JSON_TYPES.get(k, (object,)))
            # bool is an int in Python, never in JSON
            if not isinstance(value, allowed) or (isinstance(value, bool) and "boolean" not in kinds):
                raise ToolArgumentError(
                    f"tool '{self.name}': argument '{name}' must be {' or '.join(kinds)}, "
                    f"got {_json_kind(value)} {str(value)[:40]!r}"
                )
        return arguments


def _json_kind(value: Any) -> str:
    for kind, types in _JSON_TYPES.items():
        if isinstance(value, types) and not (isinstance(value, bool) and kind in ("integer", "number")):
            return kind
    return type(value).__name__


def tool_schema(fn: Callable[..., Any], name: str | None = None) -> dict[str, Any]:
    """The OpenAI-style function schema of ``fn`` (``{"type": "function", "function": {...}}``).

    A function without a docstring, or with an argument the docstring does not describe or that has
    no type hint, is refused by ``get_json_schema`` with its own message; it is re-raised naming
    the tool.
    """
    from transformers.utils import get_json_schema

    try:
        schema = get_json_schema(fn)
    except Exception as err:  # noqa: BLE001 - transformers' DocstringParsingException / TypeHintParsingException
        raise ValueError(
            f"tool '{name or getattr(fn, '__name__', fn)}': no schema from its signature and "
            f"docstring ({type(err).__name__}: {err})"
        ) from None
    schema["function"].pop("return", None)  # templates show the call's parameters, not its return type
    if name:
        schema["function"]["name"] = name
    return schema


def make_tool(
    fn: Callable[..., Any],
    name: str | None = None,
    sandboxed: bool = False,
    stateful: bool = False,
    source: str = "builtin",
) -> Tool:
    schema = tool_schema(fn, name)
    return Tool(schema["function"]["name"], fn, schema, sandboxed, stateful, source)
