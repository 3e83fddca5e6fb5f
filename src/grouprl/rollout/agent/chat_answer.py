"""From a generated completion to what the agent is answered and what is recorded.

- **Stop strings** (``stop``): the backend generates to its own end-of-turn ids; the completion is then cut
  after the first token whose decoded text completes a stop string (found by decoding prefixes of the ids,
  never by re-tokenising). The recorded (trained) ids are the generated ids up to and including that token;
  the answered content ends before the stop string and ``finish_reason`` is ``stop``. The tokens generated
  past the cut were sampled but are neither answered nor trained on.
- **A forced tool call** (``tool_choice`` ``required`` or a named function): the rendered prompt is followed by
  the tool parser's call opening (hermes: ``<tool_call>\\n`` or ``<tool_call>\\n{"name": "<name>",
  "arguments": ``), which is recorded as *prompt* ids -- the policy did not choose it, so it is not trained
  on -- and the turn is read as that opening followed by the generated text.
- **parallel_tool_calls false**: only the turn's first call is answered (the generated ids keep all of them).

A turn answered with less than it generated (a stop cut, dropped calls) is marked ``cut``: the next call is
then rendered from the agent's messages, not grown from these ids (``calls.render_call``).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from grouprl.rollout.agent.chat_request import ChatRequest, unsupported
from grouprl.rollout.sampling import Completion
from grouprl.tools.parsers import ParsedTurn, ToolParser, parse_turn

# the call opening each parser reads: (any call, a call of the function {name} -- a JSON string)
_OPENINGS = {
    "hermes": ("<tool_call>\n", '<tool_call>\n{{"name": {name}, "arguments": '),
    "hermes_lenient": ("<tool_call>\n", '<tool_call>\n{{"name": {name}, "arguments": '),
    "mistral": ("[TOOL_CALLS]", '[TOOL_CALLS][{{"name": {name}, "arguments": '),
    "llama3_json": ('{"name": "', '{{"name": {name}, "parameters": '),
}


@dataclass
class Turn:
    """One sample of a request, as answered and recorded."""

    completion: Completion  # as recorded: cut after a stop string's last token
    parsed: ParsedTurn
    reply: dict[str, Any]  # the assistant message answered
    finish: str  # stop, tool_calls or length
    cut: str  # "", "stop" or "parallel_tool_calls": the answer holds less than the generated ids


def forced_opening(parser: ToolParser, request: ChatRequest) -> str:
    """The text the turn is made to open with ("" unless ``tool_choice`` forces a call)."""
    if not request.tool_required:
        return ""
    if parser.name not in _OPENINGS:
        raise unsupported("tool_choice", f"forcing a call with the {parser.name!r} tool parser")
    any_call, named = _OPENINGS[parser.name]
    return any_call if request.tool_name is None else named.format(name=json.dumps(request.tool_name))


def cut_at_stop(tokenizer, completion: Completion, stops: list[str]) -> tuple[Completion, str] | None:
    """(the completion up to and including the token that completes the first stop string, the text
    before that stop string), or None when the completion holds none."""

    def text(k: int) -> str:
        return tokenizer.decode(completion.ids[:k], skip_special_tokens=True)

    def stopped(k: int) -> bool:
        return any(stop in text(k) for stop in stops)

    if not stops or not stopped(len(completion.ids)):
        return None
    low, high = 1, len(completion.ids)  # the first prefix whose text holds a stop string (monotone in k)
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if stopped(middle) else (middle + 1, high)
    cut = text(low)
    before = min(cut.find(stop) for stop in stops if stop in cut)
    logprobs = completion.logprobs[:low] if completion.logprobs is not None else None
    return Completion(completion.ids[:low], cut, False, logprobs, completion.policy_version), cut[:before]


def make_turn(
    tokenizer, parser: ToolParser, request: ChatRequest, completion: Completion, opening: str, index: int
) -> Turn:
    """The turn a completion makes: cut at a stop string, read (with the forced opening) for tool calls."""
    cut, visible = "", completion.text
    stopped = cut_at_stop(tokenizer, completion, request.stop)
    if stopped is not None:
        (completion, visible), cut = stopped, "stop"
    text = opening + visible
    parsed = parse_turn(text, parser, index)
    if parsed.malformed:  # the agent sees the raw text; the step keeps the penalty (agent_calls)
        parsed = ParsedTurn(content=text, malformed=parsed.malformed)
    if not request.parallel_tool_calls and len(parsed.calls) > 1:
        parsed.calls, cut = parsed.calls[:1], cut or "parallel_tool_calls"
    finish = "length" if completion.truncated else "tool_calls" if parsed.calls else "stop"
    return Turn(completion, parsed, reply_message(parsed, text), finish, cut)


def reply_message(parsed: ParsedTurn, text: str) -> dict[str, Any]:
    """The assistant message: a turn with a call that cannot be read is answered as its raw text, with no
    tool calls (what an OpenAI-compatible server whose parser fails does)."""
    if parsed.malformed:
        return {"role": "assistant", "content": text, "tool_calls": None}
    calls = [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
        }
        for c in parsed.calls
    ]
    return {
        "role": "assistant",
        "content": parsed.content if parsed.content or not calls else None,
        "tool_calls": calls or None,
    }


def logprobs_answer(tokenizer, completion: Completion, top: int) -> dict[str, Any] | None:
    """``choice.logprobs``: per generated token, its text and log-prob. The backends give no alternatives,
    so ``top_logprobs`` holds the sampled token alone."""
    if completion.logprobs is None:
        return None
    content = []
    for token_id, logprob in zip(completion.ids, completion.logprobs):
        token = tokenizer.decode([token_id])
        entry = {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8", "replace"))}
        content.append({**entry, "top_logprobs": [dict(entry)] if top else []})
    return {"content": content}


def chat_completion(tokenizer, request: ChatRequest, prompt_ids: list[int], turns: list[Turn]) -> dict[str, Any]:
    """The OpenAI chat.completion answer: one choice per sample."""
    choices = [
        {
            "index": i,
            "message": turn.reply,
            "finish_reason": turn.finish,
            "logprobs": logprobs_answer(tokenizer, turn.completion, request.top_logprobs)
            if request.want_logprobs
            else None,
        }
        for i, turn in enumerate(turns)
    ]
    generated = sum(len(turn.completion.ids) for turn in turns)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": choices,
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": generated,
            "total_tokens": len(prompt_ids) + generated,
        },
    }
