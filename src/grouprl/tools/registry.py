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

from dataclasses import dataclass
from typing import Any, Callable

from grouprl.registry import Registry
from grouprl.tools import builtin
from grouprl.tools.python_tool import python
from grouprl.tools.sandboxed import sandboxed_user_tool
from grouprl.tools.schema import Tool, make_tool
from grouprl.user_code import code_ref


@dataclass(frozen=True)
class ToolSpec:
    """A tool's function and where it runs; the ``Tool`` (schema from the signature) is made per run."""

    fn: Callable[..., Any]
    sandboxed: bool = False  # always in the sandbox (``python``: code the model writes)
    stateful: bool = False  # one state per episode
    from_file: bool = False  # a user's file: in the sandbox when ``tool_sandbox`` is on
    source: str = "builtin"  # "builtin" or the name it was given ('path/to/file.py:function')


def declare_tool(name: str, fn: Callable[..., Any], sandboxed: bool = False, stateful: bool = False) -> ToolSpec:
    ref = code_ref(name)
    return ToolSpec(
        fn, sandboxed, stateful, from_file=ref is not None and ref.is_file, source=name if ref else "builtin"
    )


TOOLS: Registry[ToolSpec] = Registry("tool", declare_tool, config_key="tools")
TOOLS.register("calculator")(builtin.calculator)
TOOLS.register("lookup")(builtin.lookup)
TOOLS.register("python", sandboxed=True, stateful=True)(python)


def resolve_tool(spec: str, sandbox_user_tools: bool = False) -> Tool:
    """The tool ``spec`` names; ``KeyError`` with one line naming the spec and what was expected."""
    ref = code_ref(spec)
    grouprl_module = (
        ref is not None and "/" not in ref.where and not ref.is_source and ref.where.split(".")[0] == "grouprl"
    )
    if sandbox_user_tools and ref is not None and not grouprl_module:  # grouprl's own modules are the trainer's
        return sandboxed_user_tool(spec)  # never imported here: schema and calls in the sandbox
    try:
        entry = TOOLS.resolve(spec)
        return make_tool(
            entry.fn,
            sandboxed=entry.sandboxed or (sandbox_user_tools and entry.from_file),
            stateful=entry.stateful,
            source=entry.source,
        )
    except (KeyError, ValueError) as err:  # an unknown name, a file that fails, a function without a schema
        raise KeyError(f"config key 'tools': {err.args[0] if err.args else err}") from None


def resolve_tools(specs: list[str], sandbox_user_tools: bool = False) -> list[Tool]:
    tools = [resolve_tool(spec, sandbox_user_tools) for spec in specs]
    names = [t.name for t in tools]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise KeyError(f"config key 'tools': two tools are named '{duplicate}'")
    return tools
