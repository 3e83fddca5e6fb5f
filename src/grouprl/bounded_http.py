"""Outbound HTTP with a total deadline and a size cap: the one way grouprl talks to a server.

A client library's ``timeout`` bounds each network operation, not the request: a server that trickles
its body a byte at a time (or a proxy that keeps a dead upstream's connection open) keeps a request
alive for ever, and a reply of any size is read whole into memory. Here each request runs under
``asyncio.wait_for`` (the whole exchange, connect to last byte, within ``deadline_s``) and its body is
read in chunks and abandoned past ``max_bytes`` (a declared ``Content-Length`` over the cap is refused
before reading). Used by the judge client (``rewards/learned/judge_client.py``), ``grouprl generate``
(``generate/pipeline.py``) and the vLLM server client (``rollout/backends/vllm_client.py``); each body is
decoded with ``safe_text.safe_json_loads``. :func:`chat_completion` is one OpenAI-style
``/chat/completions`` exchange for the first two.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

from grouprl.safe_text import JsonRejected, encodable, safe_json_loads


class RequestFailed(Exception):
    """No usable answer: the deadline passed, the body was over the cap, or the connection failed.
    ``transient`` says whether trying again may help."""

    def __init__(self, kind: str, message: str, transient: bool):
        super().__init__(f"{kind}: {message}")
        self.kind, self.transient = kind, transient


@dataclass
class Answer:
    status: int
    body: bytes


async def _exchange(client: httpx.AsyncClient, method: str, url: str, max_bytes: int, **kwargs: Any) -> Answer:
    async with client.stream(method, url, **kwargs) as response:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise RequestFailed(
                "ResponseTooLarge",
                f"{url}: the body declares {int(declared):,} bytes, over the cap of {max_bytes:,}",
                transient=False,
            )
        chunks, size = [], 0
        async for chunk in response.aiter_bytes():  # decoded: a compressed body is capped as it inflates
            size += len(chunk)
            if size > max_bytes:
                raise RequestFailed(
                    "ResponseTooLarge", f"{url}: the body passed the cap of {max_bytes:,} bytes", transient=False
                )
            chunks.append(chunk)
        return Answer(response.status_code, b"".join(chunks))


async def request(
    client: httpx.AsyncClient, method: str, url: str, *, deadline_s: float, max_bytes: int, **kwargs: Any
) -> Answer:
    """The status and body of one request, within ``deadline_s`` seconds in all and ``max_bytes`` of body;
    else :class:`RequestFailed`. ``kwargs`` go to ``httpx.AsyncClient.stream`` (``json=``, ``headers=``)."""
    try:
        return await asyncio.wait_for(_exchange(client, method, url, max_bytes, **kwargs), deadline_s)
    except asyncio.TimeoutError:
        raise RequestFailed("Deadline", f"{url}: no complete answer within {deadline_s:g} s", transient=True) from None
    except httpx.TransportError as err:  # connect, read, protocol errors
        raise RequestFailed(
            type(err).__name__, f"{url}: {str(err)[:200] or 'connection failed'}", transient=True
        ) from None


def request_sync(method: str, url: str, *, deadline_s: float, max_bytes: int, **kwargs: Any) -> Answer:
    """:func:`request` from synchronous code (a fresh client and event loop for the one request)."""

    async def one() -> Answer:
        async with httpx.AsyncClient(timeout=deadline_s) as client:
            return await request(client, method, url, deadline_s=deadline_s, max_bytes=max_bytes, **kwargs)

    return asyncio.run(one())


@dataclass
class ChatReply:
    text: str | None  # the first choice's message content (None: the server sent none)
    finish_reason: str | None = None  # "length": cut at max_tokens
    usage: dict[str, int] | None = None  # prompt_tokens / completion_tokens, where reported


def _usage(body: dict) -> dict[str, int]:
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return {}
    count = {k: usage.get(k) for k in ("prompt_tokens", "completion_tokens")}
    return {k: v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0 for k, v in count.items()}


def _error_text(status: int, body: bytes) -> str:
    decoded = safe_json_loads(body)
    error = decoded.get("error") if isinstance(decoded, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    text = message if isinstance(message, str) else body.decode("utf-8", "replace")
    return f"HTTP {status}: {encodable(' '.join(text.split()))[:200]}"


async def chat_completion(
    client: httpx.AsyncClient, base_url: str, api_key: str, body: dict[str, Any], *, deadline_s: float, max_bytes: int
) -> ChatReply:
    """``POST <base_url>/chat/completions`` within the bounds; the first choice's reply, its text ``encodable``.
    :class:`RequestFailed` for no answer (transient: connection, deadline, 429, 5xx) or a body that is no
    chat completion (not transient)."""
    answer = await request(
        client,
        "POST",
        base_url.rstrip("/") + "/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {api_key}"},
        deadline_s=deadline_s,
        max_bytes=max_bytes,
    )
    if answer.status != 200:
        raise RequestFailed(
            "HTTPStatusError",
            _error_text(answer.status, answer.body),
            transient=answer.status == 429 or answer.status >= 500,
        )
    decoded = safe_json_loads(answer.body)
    if isinstance(decoded, JsonRejected) or not isinstance(decoded, dict):
        raise RequestFailed(
            "BadReply", f"the reply body is {getattr(decoded, 'reason', 'not a JSON object')}", transient=False
        )
    choices = decoded.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = first.get("message")
    text = message.get("content") if isinstance(message, dict) else None
    reason = first.get("finish_reason")
    return ChatReply(
        encodable(text) if isinstance(text, str) else None, reason if isinstance(reason, str) else None, _usage(decoded)
    )
