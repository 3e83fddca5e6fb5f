"""Tools by name: the built-ins, or a user's ``path/to/file.py:function`` / ``package.module:function``.

A recipe lists its tools like its rewards::

    tools: [calculator, lookup, my_tools.py:search]
    tool_sandbox: true      # user tools from files run in the bubblewrap sandbox, not in-process

Built-ins are trusted and run in-process, except ``python`` (code the model writes), which always
runs in the sandbox with per-episode state. A user's tool runs in-process unless ``tool_sandbox`` is
on; then no user code runs in the trainer (as with ``sandbox_user_rewards``): a file's tool is never
imported here, every call runs the file in a fresh sandbox (``tools/sandboxed.py``), where it cannot
read the host, and a ``package.module:function`` outside grouprl is refused.
"""

from __future__ import annotations

from typing import Callable

from grouprl.tools import builtin
from grouprl.tools.python_tool import python
from grouprl.tools.sandboxed import sandboxed_user_tool
from grouprl.tools.schema import Tool, make_tool
from grouprl.user_code import import_callable

BUILTIN_TOOLS: dict[str, Callable[[], Tool]] = {
    "calculator": lambda: make_tool(builtin.calculator),
    "lookup": lambda: make_tool(builtin.lookup),
    "python": lambda: make_tool(python, sandboxed=True, stateful=True),
}


def resolve_tool(spec: str, sandbox_user_tools: bool = False) -> Tool:
    """The tool ``spec`` names; ``KeyError`` with one line naming the spec and what was expected."""
    if spec in BUILTIN_TOOLS:
        return BUILTIN_TOOLS[spec]()
    if ":" not in spec:
        raise KeyError(f"config key 'tools': unknown tool '{spec}'; built-ins: {', '.join(sorted(BUILTIN_TOOLS))}, "
                       "or 'path/to/file.py:function' / 'package.module:function'")
    where = spec.rpartition(":")[0]
    grouprl_module = "/" not in where and not where.endswith(".py") and where.split(".")[0] == "grouprl"
    if sandbox_user_tools and not grouprl_module:  # grouprl's own modules are part of the trainer already
        return sandboxed_user_tool(spec)
    fn = import_callable(spec, "tool")
    try:
        tool = make_tool(fn, source=spec)
    except ValueError as err:
        raise KeyError(f"config key 'tools': {err}") from None
    return tool


def resolve_tools(specs: list[str], sandbox_user_tools: bool = False) -> list[Tool]:
    tools = [resolve_tool(spec, sandbox_user_tools) for spec in specs]
    names = [t.name for t in tools]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise KeyError(f"config key 'tools': two tools are named '{duplicate}'")
    return tools
