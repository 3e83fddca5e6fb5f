"""Tool calls whose JSON Python decodes into trouble: every parser refuses them as malformed, none raises.

The class (issue 32, class 1): a lone-surrogate escape decodes to a ``str`` UTF-8 cannot encode, deep
nesting raises ``RecursionError``, a 5000-digit integer raises ``ValueError`` (int_max_str_digits),
``NaN`` / ``1e999`` decode to numbers no JSON writer can write back. Each payload is tried in every
parser's format and in the arguments-as-a-string form; then the worst of them go through the real
conversation runner, tools and tokenizer, and the episode is written to a JSONL log.
"""

import json
import string

import pytest

from grouprl.observe.jsonl import JsonlAppender, read_jsonl
from grouprl.models.tiny import build_tokenizer
from grouprl.records import Verdict
from grouprl.observe.step_logs import episode_record
from grouprl.rollout.conversation import ConversationSettings, run_conversation_episodes
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.safe_text import JsonRejected, encodable, safe_json_loads
from grouprl.tasks.tool_arithmetic import ToolAnswerEnv, rows
from grouprl.tools import PARSERS, make_tool, parse_turn, resolve_tools
from grouprl.tools.chat_template import TOOL_CHAT_TEMPLATE
from grouprl.tools.metrics import tool_metrics

DEEP = 5_000  # past the interpreter's recursion limit (1000)
HOSTILE_ARGUMENTS = {
    "lone surrogate": '{"expression": "\\ud800"}',
    "lone surrogate key": '{"\\udfff": "1+1"}',
    "deep nesting": '{"expression": ' + "[" * DEEP + "]" * DEEP + "}",
    "nesting past the depth cap": '{"expression": ' + "[" * 900 + "]" * 900 + "}",
    "5000-digit integer": '{"expression": 1' + "0" * 5000 + "}",
    "NaN": '{"expression": NaN}',
    "Infinity": '{"expression": -Infinity}',
    "1e999": '{"expression": 1e999}',
}
HOSTILE_NAMES = {"surrogate name": '"\\ud83d"'}


def call_objects():
    for label, arguments in HOSTILE_ARGUMENTS.items():
        yield label, '{"name": "calculator", "arguments": ' + arguments + "}"
        yield label + " (as a string)", '{"name": "calculator", "arguments": ' + json.dumps(arguments) + "}"
    for label, name in HOSTILE_NAMES.items():
        yield label, '{"name": ' + name + ', "arguments": {"expression": "1+1"}}'


def in_format(parser: str, obj: str) -> str:
    if parser in ("hermes", "hermes_lenient"):
        return f"I will compute.\n<tool_call>\n{obj}\n</tool_call>"
    if parser == "mistral":
        return f"[TOOL_CALLS][{obj}]"
    return f"<|python_tag|>{obj.replace('arguments', 'parameters', 1)}"


CASES = [(parser, label, obj) for parser in sorted(PARSERS) for label, obj in call_objects()]


@pytest.mark.parametrize("label, obj", list(call_objects()), ids=[label for label, _ in call_objects()])
def test_a_bare_hostile_json_turn_is_never_a_call_under_the_lenient_parser(label, obj):
    """Untagged, the lenient parser reads a turn as calls only when it is whole, safe JSON: hostile JSON stays
    the turn's text (an answer the rewards judge), never a call and never an exception."""
    turn = parse_turn(obj, "hermes_lenient")
    assert not turn.calls and not turn.has_calls, f"{label}: read as a call {turn.calls}"


@pytest.mark.parametrize("parser, label, obj", CASES, ids=[f"{p}-{label}" for p, label, _ in CASES])
def test_every_parser_refuses_hostile_json_as_a_malformed_call(parser, label, obj):
    turn = parse_turn(in_format(parser, obj), parser)
    assert not turn.calls, f"{label}: read as a call {turn.calls}"
    assert len(turn.malformed) == 1 and turn.has_calls
    for text in [turn.content, *turn.malformed]:
        text.encode("utf-8")  # what the model reads back and what the logs write must be encodable


@pytest.mark.parametrize(
    "text", [obj for label, obj in call_objects() if "as a string" not in label] + ["[" * DEEP, "1" * 5000, '"\\ud800"']
)
def test_the_safe_decoder_returns_a_reason_never_raises(text):
    rejected = safe_json_loads(text)
    assert isinstance(rejected, JsonRejected) and rejected.reason
    assert isinstance(safe_json_loads(text.encode()), JsonRejected)


def test_the_safe_decoder_keeps_ordinary_json_and_encodable_keeps_ordinary_text():
    assert safe_json_loads('{"a": [1, 2.5, "é😀"], "b": null}') == {"a": [1, 2.5, "é😀"], "b": None}
    assert safe_json_loads('{"x": 1} trailing', prefix=True) == ({"x": 1}, 8)
    assert encodable("plain é😀") == "plain é😀" and encodable("a\ud800b") == "a\ufffdb"


def sly(text: str) -> str:
    """A tool a user wrote that hands back text with a lone surrogate.

    Args:
        text: any text
    """
    return text + "\udcff"


def test_hostile_calls_and_results_through_the_runner_tokenizer_and_logs(tmp_path):
    tokenizer = build_tokenizer(string.printable)
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    hostile = [obj for label, obj in call_objects() if "as a string" not in label]
    turns = iter(
        [f"<tool_call>{obj}</tool_call>" for obj in hostile]
        + ['<tool_call>{"name": "sly", "arguments": {"text": "hi"}}</tool_call>', "Answer: 5"]
    )
    settings = ConversationSettings(tools=resolve_tools(["calculator"]) + [make_tool(sly)], max_tool_calls=50)
    row = rows(1)[0]
    [ep] = run_conversation_episodes(
        [lambda: ToolAnswerEnv(row["question"], row["ground_truth"])],
        [row],
        1,
        ScriptedBackend(tokenizer, lambda _: next(turns)),
        tokenizer,
        SamplingParams(max_new_tokens=1_000_000),
        settings,
        [row["seed"]],
    )
    assert ep.end_reason == "answer"
    kinds = [s.tool_results[0]["error"] for s in ep.steps[:-1]]
    assert kinds == ["malformed"] * len(hostile) + [None]
    assert tool_metrics([ep])["tools/errors/malformed"] == len(hostile)
    assert ep.steps[-2].tool_results[0]["content"] == "hi\ufffd"
    with JsonlAppender(tmp_path / "rollouts.jsonl") as sink:
        # a judge's reply quoted in the verdict carries a server's lone surrogate into the log
        sink.write(episode_record(ep, Verdict(score=0.0, reasons={"judge": "fine\ud800"}), multi_step=True))
    [record] = read_jsonl(tmp_path / "rollouts.jsonl")
    assert record["episode_length"] == len(ep.steps) and record["reward_reasons"] == {"judge": "fine\ufffd"}


@pytest.mark.parametrize("label, obj", list(call_objects()), ids=[label for label, _ in call_objects()])
def test_rewards_that_read_the_policys_json_use_the_same_decoder(label, obj):
    """``json_schema`` and ``tool_call_match`` read JSON the policy wrote through the same decoder."""
    from grouprl.records import Message
    from grouprl.rewards.builtin.completion_blocks import extract_json

    arguments = obj.split('"arguments": ', 1)[1][:-1] if "as a string" not in label else None
    if arguments is None or '"name": "calculator"' not in obj:
        return
    with pytest.raises(ValueError):
        extract_json(arguments)
    messages = [Message(role="user", content="q"), Message(role="assistant", content=arguments)]
    from grouprl.rewards.builtin.structured import json_schema

    result = json_schema(messages, schema={"type": "object"})
    assert result.score == 0.0 and result.reason.encode("utf-8")
