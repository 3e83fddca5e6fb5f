"""Each tool-call parser on well-formed and malformed turns, and its writer as the inverse."""

import pytest

from grouprl.tools import PARSERS, ToolCall, parse_turn


def test_hermes_reads_several_calls_and_the_content_around_them():
    text = (
        'Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}}\n</tool_call>'
        '\n<tool_call>{"name": "lookup", "arguments": "{\\"unit\\": \\"mile\\"}"}</tool_call><|im_end|>'
    )
    turn = parse_turn(text, "hermes", turn_index=3)
    assert [(c.name, c.arguments, c.id) for c in turn.calls] == [
        ("calculator", {"expression": "2+2"}, "call_3_0"),
        ("lookup", {"unit": "mile"}, "call_3_1"),
    ]
    assert turn.content == "Let me compute.\n\n<|im_end|>" and not turn.malformed


@pytest.mark.parametrize(
    "text, reason",
    [
        ('<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}</tool_call>', "not valid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'needs a "name"'),
        ('<tool_call>["calculator"]</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "f", "arguments": "{oops"}</tool_call>', '"arguments" string is not JSON'),
        ('<tool_call>{"name": "calculator", "argu', "unclosed <tool_call>"),
    ],
)
def test_hermes_malformed_calls_are_reported_not_executed(text, reason):
    turn = parse_turn(text, "hermes")
    assert not turn.calls and len(turn.malformed) == 1 and reason in turn.malformed[0]
    assert turn.has_calls  # a malformed call is not a final answer


def test_hermes_plain_text_is_a_final_answer():
    turn = parse_turn("Answer: 42", "hermes")
    assert turn.content == "Answer: 42" and not turn.has_calls


def test_mistral():
    turn = parse_turn(
        'Sure.[TOOL_CALLS] [{"name": "lookup", "arguments": {"unit": "day"}}, '
        '{"name": "calculator", "arguments": {"expression": "3*86400"}}]</s>',
        "mistral",
    )
    assert [c.name for c in turn.calls] == ["lookup", "calculator"] and turn.content == "Sure."
    bad = parse_turn("[TOOL_CALLS] [{name: lookup}]", "mistral")
    assert not bad.calls and "not followed by valid JSON" in bad.malformed[0]
    assert not parse_turn("It is 7.", "mistral").has_calls


def test_llama3_json():
    turn = parse_turn('<|python_tag|>{"name": "lookup", "parameters": {"unit": "ton"}}', "llama3_json")
    assert (turn.calls[0].name, turn.calls[0].arguments) == ("lookup", {"unit": "ton"})
    assert parse_turn('{"name": "lookup", "arguments": {"unit": "ton"}}', "llama3_json").calls[0].arguments == {
        "unit": "ton"
    }
    assert "not valid JSON" in parse_turn('{"name": "lookup", ', "llama3_json").malformed[0]
    assert parse_turn("The answer is 4.", "llama3_json").content == "The answer is 4."


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_each_writer_is_read_back_by_its_parser(name):
    calls = [ToolCall("calculator", {"expression": "12*(3+4)"})]
    turn = parse_turn(PARSERS[name].format_calls(calls), name)
    assert [(c.name, c.arguments) for c in turn.calls] == [("calculator", {"expression": "12*(3+4)"})]


def test_unknown_parser_is_named():
    with pytest.raises(
        KeyError, match="unknown parser 'qwen'; known: 'hermes', 'hermes_lenient', 'llama3_json', 'mistral'"
    ):
        parse_turn("x", "qwen")


# what untrained Qwen2.5-Coder-0.5B-Instruct answered on the tool recipe (docs/real_models.md)
QWEN_BARE = '{"name": "calculator", "arguments": {"expression": "1297 * 92"}}'


@pytest.mark.parametrize(
    "text",
    [
        QWEN_BARE,
        QWEN_BARE + "<|im_end|>",
        f"```json\n{QWEN_BARE}\n```",
        f"  {QWEN_BARE}\n",
        '{"name": "calculator", "parameters": {"expression": "1297 * 92"}}',
        '{"name": "calculator", "arguments": "{\\"expression\\": \\"1297 * 92\\"}"}',
    ],
)
def test_hermes_lenient_reads_a_bare_json_call(text):
    turn = parse_turn(text, "hermes_lenient", turn_index=2)
    assert [(c.name, c.arguments, c.form, c.id) for c in turn.calls] == [
        ("calculator", {"expression": "1297 * 92"}, "bare_json", "call_2_0")
    ]
    assert turn.content == "" and not turn.malformed
    assert not parse_turn(text, "hermes").has_calls  # the strict parser sees a final answer


def test_hermes_lenient_reads_several_bare_calls_and_keeps_tags_first():
    two = parse_turn(QWEN_BARE + '\n{"name": "lookup", "arguments": {"unit": "mile"}}', "hermes_lenient")
    assert [(c.name, c.form) for c in two.calls] == [("calculator", "bare_json"), ("lookup", "bare_json")]
    tagged = parse_turn(f"<tool_call>\n{QWEN_BARE}\n</tool_call>", "hermes_lenient")
    assert [(c.name, c.form) for c in tagged.calls] == [("calculator", "tagged")]
    # a turn with a tag is the hermes parser's: its malformed call stays malformed, bare JSON beside it is not read
    mixed = parse_turn(QWEN_BARE + '\n<tool_call>{"name": </tool_call>', "hermes_lenient")
    assert not mixed.calls and "not valid JSON" in mixed.malformed[0]


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ('Answer: {"name": "lookup", "arguments": {"unit": "mile"}}', "Answer:"),
        ('I will call {"name": "lookup", "arguments": {"unit": "mile"}} now', "I will call now"),
        ('{"name": "lookup", "arguments": {"unit": "mile"}} so the answer is 6', "so the answer is 6"),
        ('Let me look it up.\n```json\n{"name": "lookup", "arguments": {"unit": "mile"}}\n```', "Let me look it up."),
        ('Answer: ```{"name": "lookup", "arguments": {"unit": "mile"}}``` done<|im_end|>', "Answer: done"),
    ],
)
def test_hermes_lenient_reads_a_bare_call_wherever_it_stands(text, content):
    turn = parse_turn(text, "hermes_lenient")
    assert [(c.name, c.arguments, c.form) for c in turn.calls] == [("lookup", {"unit": "mile"}, "bare_json")]
    assert turn.content == content and not turn.malformed
    assert not parse_turn(text, "hermes").has_calls


def test_fenced_and_prefixed_calls_are_counted_as_bare_not_tagged():
    from grouprl.records import Episode, Step
    from grouprl.tools.metrics import tool_metrics

    texts = [
        f"```json\n{QWEN_BARE}\n```",
        "Answer: " + QWEN_BARE,
        f"<tool_call>\n{QWEN_BARE}\n</tool_call>",
    ]
    calls = [c for t in texts for c in parse_turn(t, "hermes_lenient").calls]
    assert [c.form for c in calls] == ["bare_json", "bare_json", "tagged"]
    step = Step(
        prompt_text="",
        prompt_ids=[],
        action_text="",
        action_ids=[],
        truncated=False,
        anchor_state="start",
        tool_calls=[{"name": c.name, "arguments": c.arguments, "form": c.form} for c in calls],
    )
    m = tool_metrics([Episode(group_id=0, index_in_group=0, row={}, steps=[step], conversation=True)])
    assert (m["tools/calls_bare_json"], m["tools/calls_tagged"]) == (2.0, 1.0)


def test_hermes_lenient_tries_a_bounded_number_of_call_like_openings():
    hostile = '{"name": ' * 100_000
    turn = parse_turn(hostile, "hermes_lenient")
    assert not turn.has_calls and turn.content == hostile.strip()


@pytest.mark.parametrize(
    "text",
    [
        "Answer: 119324",
        '{"answer": 119324}',  # JSON that is no call
        '{"name": "calculator"}',  # no arguments: could be any record with a name
        '{"answer": {"value": 6}, "note": "arguments"}',  # a key named like a call's, no call
        '{"name": "calculator", "arguments": {"expression": "2*3"}',  # cut short: nothing marks it as a call
        '["calculator"]',
        '{"a": ' * 100_000,  # nesting past the recursion limit is content, not a crash
    ],
)
def test_hermes_lenient_leaves_everything_else_as_content(text):
    turn = parse_turn(text, "hermes_lenient")
    assert not turn.has_calls and turn.content == text.strip()
