"""Each tool-call parser on well-formed and malformed turns, and its writer as the inverse."""

import pytest

from grouprl.tools import PARSERS, ToolCall, parse_turn


def test_hermes_reads_several_calls_and_the_content_around_them():
    text = ('Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}}\n</tool_call>'
            '\n<tool_call>{"name": "lookup", "arguments": "{\\"unit\\": \\"mile\\"}"}</tool_call><|im_end|>')
    turn = parse_turn(text, "hermes", turn_index=3)
    assert [(c.name, c.arguments, c.id) for c in turn.calls] == [
        ("calculator", {"expression": "2+2"}, "call_3_0"), ("lookup", {"unit": "mile"}, "call_3_1")]
    assert turn.content == "Let me compute.\n\n<|im_end|>" and not turn.malformed


@pytest.mark.parametrize("text, reason", [
    ('<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}</tool_call>', "not valid JSON"),
    ('<tool_call>{"arguments": {}}</tool_call>', 'needs a "name"'),
    ('<tool_call>["calculator"]</tool_call>', "must be a JSON object"),
    ('<tool_call>{"name": "f", "arguments": "{oops"}</tool_call>', '"arguments" string is not JSON'),
    ('<tool_call>{"name": "calculator", "argu', "unclosed <tool_call>"),
])
def test_hermes_malformed_calls_are_reported_not_executed(text, reason):
    turn = parse_turn(text, "hermes")
    assert not turn.calls and len(turn.malformed) == 1 and reason in turn.malformed[0]
    assert turn.has_calls  # a malformed call is not a final answer


def test_hermes_plain_text_is_a_final_answer():
    turn = parse_turn("Answer: 42", "hermes")
    assert turn.content == "Answer: 42" and not turn.has_calls


def test_mistral():
    turn = parse_turn('Sure.[TOOL_CALLS] [{"name": "lookup", "arguments": {"unit": "day"}}, '
                      '{"name": "calculator", "arguments": {"expression": "3*86400"}}]</s>', "mistral")
    assert [c.name for c in turn.calls] == ["lookup", "calculator"] and turn.content == "Sure."
    bad = parse_turn("[TOOL_CALLS] [{name: lookup}]", "mistral")
    assert not bad.calls and "not followed by valid JSON" in bad.malformed[0]
    assert not parse_turn("It is 7.", "mistral").has_calls


def test_llama3_json():
    turn = parse_turn('<|python_tag|>{"name": "lookup", "parameters": {"unit": "ton"}}', "llama3_json")
    assert (turn.calls[0].name, turn.calls[0].arguments) == ("lookup", {"unit": "ton"})
    assert parse_turn('{"name": "lookup", "arguments": {"unit": "ton"}}', "llama3_json").calls[0].arguments == {
        "unit": "ton"}
    assert "not valid JSON" in parse_turn('{"name": "lookup", ', "llama3_json").malformed[0]
    assert parse_turn("The answer is 4.", "llama3_json").content == "The answer is 4."


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_each_writer_is_read_back_by_its_parser(name):
    calls = [ToolCall("calculator", {"expression": "12*(3+4)"})]
    turn = parse_turn(PARSERS[name].format_calls(calls), name)
    assert [(c.name, c.arguments) for c in turn.calls] == [("calculator", {"expression": "12*(3+4)"})]


def test_unknown_parser_is_named():
    with pytest.raises(KeyError, match="unknown parser 'qwen'; known: 'hermes', 'llama3_json', 'mistral'"):
        parse_turn("x", "qwen")
