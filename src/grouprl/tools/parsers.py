"""Tool-call parsers: from an assistant turn's text to its tool calls, one parser per template format.

Chat models are trained to call tools in their template's own format, so the parser is chosen for
the template (``tool_parser`` in the recipe):

- ``hermes`` (Hermes 2 Pro, Qwen2.5/Qwen3 and most ChatML tool templates): each call is a JSON object
  ``{"name": ..., "arguments": {...}}`` inside ``<tool_call>...</tool_call>``; several calls may
  follow each other; text outside the tags is the turn's content.
- ``mistral`` (Mistral's v3+ templates): ``[TOOL_CALLS]`` followed by a JSON list of
  ``{"name": ..., "arguments": {...}}`` objects; the text before the marker is the content.
- ``llama3_json`` (Llama 3.1/3.2 JSON tool calling): the whole turn is one JSON object
  ``{"name": ..., "parameters": {...}}``, optionally after ``<|python_tag|>``; a turn that does not
  start with ``{`` is plain content.
- ``hermes_lenient``: ``hermes``, and where a turn has no tag at all, every JSON call object
  (``{"name": ..., "arguments": {...}}``) wherever it stands in the turn -- alone, several one after
  another, after a prefix (``Answer: {"name": ...}``), amid prose, or in a ```` ```json ```` fence -- is read
  as a call, and the text around the calls (fences dropped) is the content. Real instruct models often
  answer a tools prompt this way, without the tags their template asks for. Each call must carry
  ``name`` and ``arguments`` (or ``parameters``): other JSON (``{"answer": 6}``, ``{"name": "x"}``) stays
  content, so a final answer is not mistaken for a call; a bare call that does not decode is content
  too (nothing marks it as a call). Each call records its ``form``: ``tagged`` only inside the format's
  tags, ``bare_json`` for every untagged call (a fenced one included), which the metrics count apart
  (``tools/calls_tagged``, ``tools/calls_bare_json``).

A turn with no call is a final answer. A call that is there but cannot be read (bad JSON, no name,
arguments that are not an object, an unclosed tag; JSON that ``safe_text.safe_json_loads`` refuses: too
deep, an integer too long, a lone surrogate, a non-finite number) is a *malformed* call: it is answered with an
error message and counted, never executed. Each parser also writes calls in its format
(``format_calls``), which is how expert traces for SFT are made.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from grouprl.registry import Registry
from grouprl.safe_text import JsonRejected, encodable, safe_json_loads


@dataclass
class ToolCall:
    name: str
    arguments: Any  # a dict when well formed; checked against the schema before the call
    id: str = ""
    form: str = "tagged"  # "tagged": in the format's own markup; "bare_json": hermes_lenient's untagged JSON


@dataclass
class ParsedTurn:
    content: str  # the text outside the calls
    calls: list[ToolCall] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)  # one message per call that could not be read

    @property
    def has_calls(self) -> bool:
        return bool(self.calls or self.malformed)


def _call_from_object(obj: Any, arguments_key: str = "arguments") -> ToolCall | str:
    """A ToolCall from a decoded JSON object, or the reason it is not one."""
    if not isinstance(obj, dict):
        return f"a tool call must be a JSON object, got {type(obj).__name__}"
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return 'a tool call needs a "name" string'
    arguments = obj.get(arguments_key, {})
    if isinstance(arguments, str):  # some models send the arguments as a JSON string
        arguments = safe_json_loads(arguments)
        if isinstance(arguments, JsonRejected):
            return f"tool call '{name}': its \"{arguments_key}\" string is not JSON ({arguments.reason})"
    return ToolCall(name, arguments)


def _decode(text: str) -> tuple[Any, str | None]:
    value = safe_json_loads(text)
    if isinstance(value, JsonRejected):
        return None, f"tool call is {value.reason}: {encodable(text.strip()[:60])!r}"
    return value, None


_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def parse_hermes(text: str) -> ParsedTurn:
    turn = ParsedTurn(content="")
    pieces, last = [], 0
    for match in _HERMES.finditer(text):
        pieces.append(text[last : match.start()])
        last = match.end()
        obj, error = _decode(match.group(1))
        call = error or _call_from_object(obj)
        if isinstance(call, str):
            turn.malformed.append(call)
        else:
            turn.calls.append(call)
    rest = text[last:]
    if "<tool_call>" in rest:  # opened, never closed (often: cut at max_new_tokens)
        turn.malformed.append("unclosed <tool_call> tag")
        rest = rest[: rest.index("<tool_call>")]
    turn.content = ("".join(pieces) + rest).strip()
    return turn


def format_hermes(calls: list[ToolCall]) -> str:
    return "\n".join(
        f"<tool_call>\n{json.dumps({'name': c.name, 'arguments': c.arguments})}\n</tool_call>" for c in calls
    )


MISTRAL_MARKER = "[TOOL_CALLS]"


def parse_mistral(text: str) -> ParsedTurn:
    if MISTRAL_MARKER not in text:
        return ParsedTurn(content=text.strip())
    content, _, rest = text.partition(MISTRAL_MARKER)
    turn = ParsedTurn(content=content.strip())
    decoded = safe_json_loads(rest, prefix=True)
    if isinstance(decoded, JsonRejected):
        turn.malformed.append(
            f"{MISTRAL_MARKER} is not followed by valid JSON ({decoded.reason}): {encodable(rest.strip()[:60])!r}"
        )
        return turn
    objects = decoded[0]
    for obj in objects if isinstance(objects, list) else [objects]:
        call = _call_from_object(obj)
        if isinstance(call, str):
            turn.malformed.append(call)
        else:
            turn.calls.append(call)
    return turn


def format_mistral(calls: list[ToolCall]) -> str:
    return MISTRAL_MARKER + json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls])


PYTHON_TAG = "<|python_tag|>"


def parse_llama3_json(text: str) -> ParsedTurn:
    body = text.strip()
    if body.startswith(PYTHON_TAG):
        body = body[len(PYTHON_TAG) :].strip()
    if not body.startswith("{"):
        return ParsedTurn(content=text.strip())
    obj, error = _decode(body)
    if error:
        return ParsedTurn(content="", malformed=[error])
    # Llama's own templates name the arguments "parameters"; accept "arguments" as well
    call = _call_from_object(obj, "parameters" if isinstance(obj, dict) and "parameters" in obj else "arguments")
    return ParsedTurn(content="", malformed=[call]) if isinstance(call, str) else ParsedTurn(content="", calls=[call])


def format_llama3_json(calls: list[ToolCall]) -> str:
    if len(calls) != 1:
        raise ValueError("llama3_json carries exactly one call per turn")
    return json.dumps({"name": calls[0].name, "parameters": calls[0].arguments})


_END_MARKS = re.compile(r"(\s*<\|[a-z_]+\|>)+$")  # an end-of-turn token a backend left in the text
# where a call object may start: an opening brace and a call's own key
_CALL_START = re.compile(r'\{\s*"(?:name|arguments|parameters)"\s*:')
_FENCE_OPEN = re.compile(r"```(?:json)?[ \t]*\n?[ \t]*$")  # just before a call: a fence opening
_FENCE_CLOSE = re.compile(r"[ \t]*\n?[ \t]*```")  # just after it: the fence closing
MAX_BARE_CANDIDATES = 32  # call-like openings tried per turn (a model's turn is short; a hostile one is not)


def _bare_call_at(body: str, start: int) -> tuple[ToolCall, int] | None:
    """The call object starting at ``start`` and where it ends, or None when none decodes there."""
    decoded = safe_json_loads(body[start:], prefix=True)  # the one safe decoder (safe_text.py)
    if isinstance(decoded, JsonRejected):
        return None
    obj, end = decoded[0], start + decoded[1]
    if not isinstance(obj, dict) or not ({"arguments", "parameters"} & obj.keys()):
        return None
    call = _call_from_object(obj, "parameters" if "parameters" in obj else "arguments")
    if isinstance(call, str):
        return None
    call.form = "bare_json"
    return call, end


def _bare_json_calls(text: str) -> tuple[list[ToolCall], str] | None:
    """Every untagged JSON call object in the turn and the text around them (a fence around a call dropped
    with it), else None."""
    body = _END_MARKS.sub("", text).strip()
    calls: list[ToolCall] = []
    pieces: list[str] = []
    pos = 0
    for tried, match in enumerate(_CALL_START.finditer(body)):
        if tried >= MAX_BARE_CANDIDATES:
            break
        if match.start() < pos:  # inside a call already read
            continue
        found = _bare_call_at(body, match.start())
        if found is None:
            continue
        before, (call, end) = body[pos : match.start()], found
        fence_open, fence_close = _FENCE_OPEN.search(before), _FENCE_CLOSE.match(body, end)
        if fence_open and fence_close:  # a fenced call: the fence goes with it
            before, end = before[: fence_open.start()], fence_close.end()
        pieces.append(before)
        calls.append(call)
        pos = end
    if not calls:
        return None
    pieces.append(body[pos:])
    return calls, " ".join(p.strip() for p in pieces if p.strip())


def parse_hermes_lenient(text: str) -> ParsedTurn:
    turn = parse_hermes(text)
    if turn.has_calls or "<tool_call>" in text:
        return turn
    found = _bare_json_calls(text)
    return ParsedTurn(content=found[1], calls=found[0]) if found else turn


@dataclass(frozen=True)
class ToolParser:
    name: str
    parse: Callable[[str], ParsedTurn]
    format_calls: Callable[[list[ToolCall]], str]


# Built-ins only: a parser is two functions (read a turn, write calls for demonstrations), not one.
PARSERS: Registry[ToolParser] = Registry("parser", config_key="tool_parser", takes_code=False)
PARSERS.update(
    hermes=ToolParser("hermes", parse_hermes, format_hermes),
    mistral=ToolParser("mistral", parse_mistral, format_mistral),
    llama3_json=ToolParser("llama3_json", parse_llama3_json, format_llama3_json),
    hermes_lenient=ToolParser("hermes_lenient", parse_hermes_lenient, format_hermes),
)
get_parser = PARSERS.resolve  # the parser of a name; UnknownName lists the known ones


def parse_turn(text: str, parser: str | ToolParser = "hermes", turn_index: int = 0) -> ParsedTurn:
    """The turn's content and calls; calls get ids ``call_<turn>_<k>`` (the ``tool_call_id`` of their results)."""
    parsed = (get_parser(parser) if isinstance(parser, str) else parser).parse(text)
    for k, call in enumerate(parsed.calls):
        call.id = call.id or f"call_{turn_index}_{k}"
    return parsed
