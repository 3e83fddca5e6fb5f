"""Streamed answers (``stream: true``): the whole turn is generated first, then sent as server-sent events.

A streamed call is generated, recorded and trained on exactly as the same call unstreamed: streaming only
changes how the answer travels. :func:`chat_chunks` turns a ``chat.completion`` answer into OpenAI's
``chat.completion.chunk`` events (a role delta, the content in a few pieces, each tool call as its index, id,
type and name, then its arguments in pieces, a last chunk with ``finish_reason``, a usage chunk when
``stream_options.include_usage``, then ``data: [DONE]``); :func:`response_events` turns a Responses API
``response`` into its typed events. The HTTP layer sends an :class:`EventStream` with
``Transfer-Encoding: chunked`` (``http_server``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

PIECES = 4  # a content or arguments string is streamed in this many pieces (fewer when it is short)


@dataclass
class EventStream:
    """The events of one streamed answer, each already in its ``data: ...\\n\\n`` form."""

    events: list[bytes] = field(default_factory=list)

    def add(self, data: dict[str, Any] | str, event: str | None = None) -> None:
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        head = f"event: {event}\n" if event else ""
        self.events.append(f"{head}data: {text}\n\n".encode())


def pieces(text: str, count: int = PIECES) -> list[str]:
    """``text`` in up to ``count`` consecutive non-empty pieces."""
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)]


def chat_chunks(answer: dict[str, Any], include_usage: bool) -> EventStream:
    """A ``chat.completion`` answer as the chunks OpenAI streams it."""
    stream = EventStream()
    head = {
        "id": answer["id"],
        "object": "chat.completion.chunk",
        "created": answer["created"],
        "model": answer["model"],
        "system_fingerprint": None,
    }

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None, logprobs=None) -> None:
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        stream.add({**head, "choices": [choice], **({"usage": None} if include_usage else {})})

    for choice in answer["choices"]:
        index, message = choice["index"], choice["message"]
        chunk(index, {"role": "assistant", "content": ""}, logprobs=choice["logprobs"])
        for piece in pieces(message["content"] or ""):
            chunk(index, {"content": piece})
        for k, call in enumerate(message["tool_calls"] or []):
            function = {"name": call["function"]["name"], "arguments": ""}
            chunk(index, {"tool_calls": [{"index": k, "id": call["id"], "type": "function", "function": function}]})
            for piece in pieces(call["function"]["arguments"]):
                chunk(index, {"tool_calls": [{"index": k, "function": {"arguments": piece}}]})
        chunk(index, {}, choice["finish_reason"])
    if include_usage:
        stream.add({**head, "choices": [], "usage": answer["usage"]})
    stream.add("[DONE]")
    return stream


def response_events(response: dict[str, Any]) -> EventStream:
    """A Responses API ``response`` as its stream: created, in progress, each output item (added, its text or
    arguments in deltas, done), completed (or incomplete)."""
    stream, number = EventStream(), iter(range(1 << 30))

    def emit(kind: str, **data: Any) -> None:
        stream.add({"type": kind, "sequence_number": next(number), **data}, event=kind)

    opening = {**response, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    emit("response.created", response=opening)
    emit("response.in_progress", response=opening)
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            _message_events(emit, index, item)
        else:
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            for piece in pieces(item["arguments"]):
                emit("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=piece)
            emit(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            )
            emit("response.output_item.done", output_index=index, item=item)
    emit("response.completed" if response["status"] == "completed" else "response.incomplete", response=response)
    return stream


def _message_events(emit, index: int, item: dict[str, Any]) -> None:
    """A message item's events: added, its one text part (added, deltas, done), done."""
    emit("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []})
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    part = item["content"][0]
    emit("response.content_part.added", **where, part={**part, "text": ""})
    for piece in pieces(part["text"]):
        emit("response.output_text.delta", **where, delta=piece, logprobs=[])
    emit("response.output_text.done", **where, text=part["text"], logprobs=[])
    emit("response.content_part.done", **where, part=part)
    emit("response.output_item.done", output_index=index, item=item)
