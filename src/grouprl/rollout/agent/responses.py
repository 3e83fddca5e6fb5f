"""The Responses API (``POST .../v1/responses``) on the chat-completions path.

A Responses request is converted to a chat-completions body (:func:`chat_body`) and then served exactly as
one: the same check (``chat_request.read_request``), the same batcher, the same recording. ``input`` (a string,
or items: messages whose content is a string or ``input_text``/``output_text`` parts, ``function_call`` and
``function_call_output`` items) becomes ``messages``, after a system message holding ``instructions``;
``previous_response_id`` prepends that response's input and output items (stored per episode; its
instructions are not carried over, as OpenAI does); function ``tools`` in the Responses form become
chat-completions tools; ``tool_choice``, ``parallel_tool_calls``, ``max_output_tokens`` and ``stream`` carry
over. The answer (:func:`response_object`) is a ``response``: a ``message`` item with ``output_text``, a
``function_call`` item per call, ``usage``; ``streaming.response_events`` streams it. Hosted tools, structured
output (``text.format`` other than text), background mode, stored prompts and conversations are refused.
"""

from __future__ import annotations

import uuid
from typing import Any

from grouprl.rollout.agent.calls import EpisodeCalls
from grouprl.rollout.agent.chat_request import EndpointError, unsupported

_REFUSED = ("background", "prompt", "conversation")
_CARRIED = ("model", "temperature", "top_p", "parallel_tool_calls", "stream", "user", "metadata", "store")


def _bad(param: str, message: str) -> EndpointError:
    return EndpointError(400, "bad_request", message, param)


def chat_body(body: Any, episode: EpisodeCalls) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the chat-completions body this request is, the input items it stands on, previous ones first)."""
    if not isinstance(body, dict):
        raise _bad("input", "the request body must be a JSON object")
    for key in _REFUSED:
        if body.get(key):
            raise unsupported(key, "is set")
    text = body.get("text")
    if isinstance(text, dict) and (text.get("format") or {}).get("type", "text") != "text":
        raise unsupported("text.format", "asks for structured output")
    items = _input_items(body.get("input"))
    previous = body.get("previous_response_id")
    if previous is not None:
        with episode.lock:
            stored = episode.responses.get(previous) if isinstance(previous, str) else None
        if stored is None:
            raise EndpointError(
                400, "previous_response_not_found", f"no response {previous!r} in this episode", "previous_response_id"
            )
        items = stored + items
    messages = _messages(items)
    if body.get("instructions"):
        messages.insert(0, {"role": "system", "content": str(body["instructions"])})
    chat: dict[str, Any] = {key: body[key] for key in _CARRIED if key in body}
    chat["messages"] = messages
    if body.get("tools"):
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    if body.get("max_output_tokens") is not None:
        chat["max_completion_tokens"] = body["max_output_tokens"]
    return chat, items


def _input_items(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise _bad("input", "'input' must be a string or a list of items")
    return list(value)


def _messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages for Responses items; a function call joins the assistant message just before it."""
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message":
            messages.append({"role": item.get("role"), "content": _content(item.get("content"), i)})
        elif kind == "function_call":
            call = {
                "id": str(item.get("call_id") or ""),
                "type": "function",
                "function": {"name": str(item.get("name") or ""), "arguments": item.get("arguments") or "{}"},
            }
            if not (messages and messages[-1]["role"] == "assistant"):
                messages.append({"role": "assistant", "content": ""})
            messages[-1].setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            content = _content(item.get("output"), i)
            messages.append({"role": "tool", "tool_call_id": str(item.get("call_id") or ""), "content": content})
        elif kind != "reasoning":  # a reasoning item carries nothing the template renders
            raise unsupported("input", f"holds an item of type {kind!r} at input[{i}]")
    return messages


def _content(content: Any, index: int) -> str:
    """A message's (or a call output's) text: a string or a list of text parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "text") for p in content
    ):
        return "".join(str(p.get("text", "")) for p in content)
    raise _bad(
        "input", f"input[{index}]: content must be text (input_text or output_text parts); images are not served"
    )


def _tools(tools: Any) -> list[dict[str, Any]]:
    """Responses function tools (``{"type": "function", "name", "description", "parameters"}``) as chat tools."""
    if not isinstance(tools, list):
        raise _bad("tools", "'tools' must be a list")
    out = []
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else tool
            raise unsupported("tools", f"holds a {kind!r} tool (function tools only)")
        function = {key: tool[key] for key in ("name", "description", "parameters") if tool.get(key) is not None}
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    if choice in ("auto", "none", "required"):
        return choice
    raise unsupported("tool_choice", f"= {choice!r} (auto, none, required or a function)")


def response_object(
    body: dict[str, Any], answer: dict[str, Any], items: list[dict[str, Any]], episode: EpisodeCalls
) -> dict[str, Any]:
    """The ``response`` for a served chat completion; stored on the episode for ``previous_response_id``."""
    (choice,) = answer["choices"]
    message, output = choice["message"], []
    if message.get("content"):
        text = {"type": "output_text", "text": message["content"], "annotations": [], "logprobs": []}
        item = {"type": "message", "id": _id("msg"), "status": "completed", "role": "assistant", "content": [text]}
        output.append(item)
    for call in message.get("tool_calls") or []:
        function = call["function"]
        output.append(
            {
                "type": "function_call",
                "id": _id("fc"),
                "call_id": call["id"],
                "name": function["name"],
                "arguments": function["arguments"],
                "status": "completed",
            }
        )
    usage = answer["usage"]
    incomplete = _cut_by_the_client(choice, usage, body.get("max_output_tokens"))
    response = {
        "id": _id("resp"),
        "object": "response",
        "created_at": answer["created"],
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "error": None,
        "model": answer["model"],
        "output": output,
        "instructions": body.get("instructions"),
        "previous_response_id": body.get("previous_response_id"),
        "max_output_tokens": body.get("max_output_tokens"),
        "tools": body.get("tools") or [],
        "tool_choice": body.get("tool_choice") or "auto",
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "metadata": body.get("metadata") if isinstance(body.get("metadata"), dict) else {},
        "store": body.get("store") is not False,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["total_tokens"],
        },
    }
    with episode.lock:
        episode.responses[response["id"]] = items + output
        episode.response_objects[response["id"]] = response
    return response


def _cut_by_the_client(choice: dict[str, Any], usage: dict[str, Any], cap: Any) -> bool:
    """ "incomplete" when the client's own max_output_tokens cut the turn, as OpenAI reports it. A turn cut by the
    run's max_new_tokens (a cap the client never asked for) completes, as a chat completion's "length" does for
    chat clients: the sample is recorded as truncated either way, and frameworks that treat "incomplete" as an
    error (the Agents SDK) keep their loop going."""
    return choice["finish_reason"] == "length" and cap is not None and usage["completion_tokens"] >= cap


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"
