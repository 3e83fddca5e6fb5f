"""Tool schemas from type hints and docstrings, and the argument checks made against them."""

import pytest

from grouprl.tools import ToolArgumentError, make_tool, resolve_tool, resolve_tools, tool_schema


def scale(value: float, factor: int = 2, label: str | None = None) -> str:
    """Multiply a value.

    Args:
        value: the number to scale
        factor: how many times
        label: an optional name for it
    """
    return f"{label or ''}{value * factor}"


def test_schema_comes_from_hints_and_docstring():
    schema = tool_schema(scale)
    fn = schema["function"]
    assert fn["name"] == "scale" and fn["description"] == "Multiply a value."
    props = fn["parameters"]["properties"]
    assert props["value"] == {"type": "number", "description": "the number to scale"}
    assert props["factor"]["type"] == "integer"
    assert fn["parameters"]["required"] == ["value"]
    assert "return" not in fn


def test_a_function_without_docstring_is_refused_naming_it():
    def bare(x: int) -> int:
        return x

    with pytest.raises(ValueError, match="tool 'bare': no schema"):
        tool_schema(bare)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"factor": 3}, "missing required argument 'value'"),
        ({"value": 1, "scale": 2}, "unknown argument 'scale'"),
        ({"value": "one"}, "argument 'value' must be number, got string"),
        ({"value": 1, "factor": True}, "argument 'factor' must be integer, got boolean"),
        ({"value": 1, "factor": 1.5}, "argument 'factor' must be integer, got number"),
        (["value", 1], "arguments must be a JSON object"),
    ],
)
def test_wrong_arguments_are_named(arguments, message):
    with pytest.raises(ToolArgumentError, match=message):
        make_tool(scale).check_arguments(arguments)


def test_right_arguments_pass():
    tool = make_tool(scale)
    assert tool.check_arguments({"value": 2, "factor": 3}) == {"value": 2, "factor": 3}
    assert tool.check_arguments({"value": 2.5, "label": None}) == {"value": 2.5, "label": None}


def test_tools_by_name_and_by_file(tmp_path):
    path = tmp_path / "my_tools.py"
    path.write_text(
        'def shout(text: str) -> str:\n    """Upper-case a text.\n\n    Args:\n'
        '        text: what to shout\n    """\n    return text.upper()\n'
    )
    tools = resolve_tools(["calculator", f"{path}:shout"])
    assert [t.name for t in tools] == ["calculator", "shout"]
    assert tools[1].fn("hi") == "HI" and not tools[1].sandboxed
    assert resolve_tool(f"{path}:shout", sandbox_user_tools=True).sandboxed
    assert resolve_tool("python").sandboxed and resolve_tool("python").stateful
    with pytest.raises(KeyError, match="unknown tool 'calc'"):
        resolve_tool("calc")
    with pytest.raises(KeyError, match="has no function 'whisper'"):
        resolve_tool(f"{path}:whisper")
    with pytest.raises(KeyError, match="two tools are named 'calculator'"):
        resolve_tools(["calculator", "calculator"])
