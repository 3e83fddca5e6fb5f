"""An agent's chat-completion calls: how each is rendered to token ids, recorded, and turned into steps.

The endpoint (``rollout/agent/endpoint.py``) serves the calls; this module holds what they leave behind.

**Rendering without re-tokenising what the model generated.** A call's prompt is the chat template's
rendering of the request's messages with its ``tools``. But when the request is an earlier call's
messages, then exactly the reply the endpoint gave, then new messages (tool results, a user turn) -- the
usual append-only agent loop -- the prompt ids are that call's prompt ids, the ids the engine generated,
then the template's tokens for the new messages and the next assistant header (``continuation_text``,
as conversation mode grows a chat). So consecutive calls extend each other token for token. A request
that rewrote its history (a summary, a dropped message, a sub-agent with its own chat) is rendered
afresh and starts a new sequence; so is one after a call whose answer held less than it generated (cut at a
stop string, calls dropped by ``parallel_tool_calls``) or was cut at the length cap. Such a fresh rendering
may still continue the recorded ids token for token; ``call_segments`` decides from the ids alone.

**Segments.** :func:`call_segments` splits an episode's calls into chains where each call's prompt
extends an earlier call's prompt + completion: one chain is a *merged* episode (one training sample),
several a *split* one (one sample per chain, all sharing the episode's reward).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

from grouprl.records import Step
from grouprl.rollout.conversation import ConversationSettings, continuation_text, interaction_key, tool_state
from grouprl.rollout.sampling import Completion
from grouprl.tools.execution import ToolOutcome
from grouprl.tools.parsers import ParsedTurn


@dataclass
class CallRecord:
    """One served chat completion, as the training sample needs it."""

    messages: list[dict[str, Any]]  # the request's messages, normalised (see normalise_messages)
    tools: list[dict[str, Any]] | None
    prompt_text: str
    prompt_ids: list[int]
    completion: Completion
    parsed: ParsedTurn
    reply: dict[str, Any]  # the assistant message the endpoint answered with
    policy_version: int
    extends: bool  # the prompt was built on an earlier call's ids (append-only chat)
    latency_s: float = 0.0
    cut: str = ""  # the answer holds less than the generated ids (a stop string, dropped calls): never grown from
    params: dict[str, str] = field(default_factory=dict)  # the request's other parameters, as sent


@dataclass
class EpisodeCalls:
    """Everything the endpoint saw for one episode; written by the endpoint's threads, read after it closed."""

    episode_id: str
    key: str = field(default="", repr=False)  # the episode's own credential: its agent's api_key
    calls: list[CallRecord] = field(default_factory=list)
    refused: Counter = field(default_factory=Counter)  # error kind -> requests answered with it
    admitted: int = 0  # calls let through to the batcher (max_calls counts these)
    closed: bool = False  # its agent returned, failed or timed out: every later call is refused, never recorded
    started: bool = True  # its agent runs (the runner holds agents past the endpoint's batch until a slot frees)
    over_limit: bool = False  # a call past max_calls was asked for
    responses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # Responses API: id -> its items
    response_objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> the response (GET by id)
    lock: threading.Lock = field(default_factory=threading.Lock)


# --- messages as the template and the comparisons see them -----------------------------------------
def _text(content: Any) -> str:
    """A message's content as text: a string, None, or a list of text parts (what OpenAI accepts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise ValueError("message content must be a string or a list of text parts; images and audio are not served")


def _arguments(value: Any) -> Any:
    """A call's arguments as the template renders them: the JSON object an OpenAI client sends as a string."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def normalise_messages(messages: Any) -> list[dict[str, Any]]:
    """The request's messages with text content, parsed tool-call arguments and no null fields;
    ``ValueError`` naming the message that cannot be served."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in (
            "system",
            "developer",
            "user",
            "assistant",
            "tool",
        ):
            raise ValueError(f"messages[{i}]: expected an object with role system, user, assistant or tool")
        try:
            normal: dict[str, Any] = {
                "role": "system" if message["role"] == "developer" else message["role"],
                "content": _text(message.get("content")),
            }
        except ValueError as err:
            raise ValueError(f"messages[{i}]: {err}") from None
        for key in ("name", "tool_call_id"):
            if message.get(key):
                normal[key] = message[key]
        calls = message.get("tool_calls")
        if calls:
            normal["tool_calls"] = [
                {
                    "id": c.get("id", ""),
                    "type": "function",
                    "function": {
                        "name": c.get("function", {}).get("name", ""),
                        "arguments": _arguments(c.get("function", {}).get("arguments")),
                    },
                }
                for c in calls
            ]
        out.append(normal)
    return out


def same_reply(sent: dict[str, Any], reply: dict[str, Any]) -> bool:
    """The agent handed back the assistant message the endpoint answered with (ids aside)."""

    def calls(m):
        return [(c["function"]["name"], _arguments(c["function"]["arguments"])) for c in m.get("tool_calls") or []]

    return (
        sent["role"] == "assistant"
        and sent["content"].strip() == (reply.get("content") or "").strip()
        and calls(sent) == calls(reply)
    )


@dataclass
class _Rendering:  # what continuation_text reads of ConversationSettings
    schemas: list[dict[str, Any]] | None
    chat_template_kwargs: dict[str, Any] | None


def render_call(
    tokenizer,
    earlier: list[CallRecord],
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    template_kwargs: dict[str, Any] | None,
) -> tuple[str, list[int], bool]:
    """(prompt text, prompt ids, whether they extend an earlier call's) for a request of this episode."""
    for call in sorted(earlier, key=lambda c: -len(c.messages)):  # the longest history that matches
        n = len(call.messages)
        if (
            call.tools != tools
            or call.completion.truncated
            or call.cut
            or len(messages) <= n
            or messages[:n] != call.messages
            or not same_reply(messages[n], call.reply)
        ):
            continue
        end_of_turn = tokenizer.decode(call.completion.ids[-1:])
        rendering = cast(ConversationSettings, _Rendering(tools, template_kwargs))
        try:
            suffix = continuation_text(tokenizer, messages[: n + 1], messages[n + 1 :], rendering, end_of_turn)
        except ValueError:  # the template re-renders earlier turns: no token-for-token growth possible
            break
        ids = call.prompt_ids + list(call.completion.ids) + tokenizer(suffix, add_special_tokens=False)["input_ids"]
        return call.prompt_text + call.completion.text + end_of_turn + suffix, ids, True
    text = tokenizer.apply_chat_template(
        messages, tools=tools or None, add_generation_prompt=True, tokenize=False, **(template_kwargs or {})
    )
    return text, tokenizer(text, add_special_tokens=False)["input_ids"], False


# --- from calls to steps ------------------------------------------------------------------------------
def call_segments(steps: list[Step]) -> list[list[int]]:
    """Step indices per chain: each step joins the chain whose last prompt + action its prompt extends
    (the longest such), or starts a new one."""
    segments: list[list[int]] = []
    for t, step in enumerate(steps):
        best, best_len = None, -1
        for k, segment in enumerate(segments):
            tip = steps[segment[-1]]
            length = len(tip.prompt_ids) + len(tip.action_ids)
            if length > best_len and step.prompt_ids[:length] == tip.prompt_ids + tip.action_ids:
                best, best_len = k, length
        if best is None:
            segments.append([t])
        else:
            segments[best].append(t)
    return segments


def interactions(messages: list[dict[str, Any]]) -> list[str]:
    """The (tool, arguments, result) interactions a chat holds, keyed as conversation mode keys them."""
    asked: dict[str, tuple[str, Any]] = {}
    pending: list[tuple[str, Any]] = []  # calls without ids are answered in order
    keys = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            named = (call["function"]["name"], call["function"]["arguments"])
            if call.get("id"):
                asked[call["id"]] = named
            else:
                pending.append(named)
        if message["role"] == "tool":
            name, arguments = asked.pop(message.get("tool_call_id", ""), None) or (
                pending.pop(0) if pending else (message.get("name", ""), None)
            )
            keys.append(interaction_key(ToolOutcome(name, arguments, message["content"])))
    return keys


def calls_to_steps(calls: list[CallRecord], anchor: str, invalid_penalty: float) -> list[Step]:
    """One step per call, in the order they were served."""
    steps = []
    for t, call in enumerate(calls):
        ids = {c.id for c in call.parsed.calls}
        answers = next(
            (
                [dict(m, error=None) for m in later.messages if m["role"] == "tool" and m.get("tool_call_id") in ids]
                for later in calls[t + 1 :]
                if any(m.get("tool_call_id") in ids for m in later.messages)
            ),
            [],
        )
        step = Step(
            prompt_text=call.prompt_text,
            prompt_ids=call.prompt_ids,
            action_text=call.completion.text,
            action_ids=list(call.completion.ids),
            truncated=call.completion.truncated,
            anchor_state=tool_state(interactions(call.messages)) if anchor == "tool_state" else t,
            messages=call.messages,
            observation=call.messages[-1]["content"],
            logprobs=call.completion.logprobs,
            policy_version=call.policy_version,
            tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments} for c in call.parsed.calls],
            tool_results=answers,
        )
        if call.parsed.malformed:  # the model's mistake, as conversation mode charges it
            step.valid, step.penalty = False, invalid_penalty
            step.invalid_reason = call.parsed.malformed[0][:120]
        steps.append(step)
    return steps
