"""What the agent endpoint does with a chat-completion request: check it, batch it, generate, answer.

:func:`read_request` turns a request body into a :class:`ChatRequest` or refuses it with an
:class:`EndpointError` (OpenAI's error schema: ``{"error": {"message", "type", "param", "code"}}``).
Requests the endpoint cannot serve faithfully are refused rather than half-served: ``n`` > 1, streaming,
stop strings, logit biases, penalties, forced tool choices, structured output, non-text content, an
unknown model name, a context past the limit. Sampling knobs (``temperature``, ``top_p``, ``seed``) are
read and ignored: the run's sampling parameters produced the log-probs the update corrects against, so
an agent cannot change them; ``max_tokens`` can only lower the run's ``max_new_tokens``.

:class:`CallBatcher` owns the one thread that touches the tokenizer and the backend: it collects
requests for ``window_s`` after the first arrives (or until ``params.batch_size``, or until every episode
that may still call is waiting: ``live_episodes``), renders them
(``agent_calls.render_call``), makes one ``backend.generate`` call per distinct length cap, parses the
tool calls with the configured parser and records each call against its episode.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from grouprl.rollout.agent.calls import CallRecord, EpisodeCalls, normalise_messages, render_call
from grouprl.rollout.sampling import SamplingParams
from grouprl.tools.parsers import ParsedTurn, get_parser, parse_turn

log = logging.getLogger(__name__)

# request fields that change what is generated in ways the recorded sample could not show
_UNSUPPORTED = ("logit_bias", "functions", "function_call", "audio", "prediction", "best_of", "suffix", "echo")


class EndpointError(Exception):
    """A request the endpoint refuses, as OpenAI answers it. ``kind`` is what the metrics count."""

    def __init__(
        self, status: int, kind: str, message: str, param: str | None = None, type_: str = "invalid_request_error"
    ):
        super().__init__(message)
        self.status, self.kind, self.message, self.param, self.type = status, kind, message, param, type_

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.kind}}


@dataclass
class ChatRequest:
    episode: EpisodeCalls
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    max_new_tokens: int
    want_logprobs: bool
    received: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    status: int = 200
    answer: dict[str, Any] = field(default_factory=dict)

    def finish(self, status: int, answer: dict[str, Any]) -> None:
        self.status, self.answer = status, answer
        self.done.set()


def _unsupported(param: str, why: str) -> EndpointError:
    return EndpointError(
        400,
        "unsupported_parameter",
        f"'{param}' {why}: the grouprl endpoint does not serve it "
        "(the recorded training sample could not show its effect)",
        param,
    )


def read_request(
    body: Any, episode: EpisodeCalls, model_names: tuple[str, ...], run_max_new_tokens: int
) -> ChatRequest:
    """The request as the batcher serves it; ``EndpointError`` for anything that cannot be served."""
    if not isinstance(body, dict):
        raise EndpointError(400, "bad_request", "the request body must be a JSON object")
    model = body.get("model")
    if model not in model_names:
        raise EndpointError(
            404,
            "model_not_found",
            f"the model {model!r} does not exist; this endpoint serves {' or '.join(repr(n) for n in model_names)}",
            "model",
        )
    _refuse_unsupported(body)
    choice = body.get("tool_choice")
    tools = _tools(body)
    try:
        messages = normalise_messages(body.get("messages"))
    except ValueError as err:
        raise EndpointError(400, "bad_request", str(err), "messages") from None
    cap = body.get("max_completion_tokens") or body.get("max_tokens")
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise EndpointError(400, "bad_request", f"'max_tokens' must be a positive integer, got {cap!r}", "max_tokens")
    return ChatRequest(
        episode,
        model,
        messages,
        None if choice == "none" else tools,
        min(cap or run_max_new_tokens, run_max_new_tokens),
        bool(body.get("logprobs")),
    )


def _refuse_unsupported(body: dict[str, Any]) -> None:
    """An OpenAI-style 400 naming the first parameter this endpoint does not serve."""
    if body.get("n") not in (None, 1):
        raise _unsupported("n", f"= {body.get('n')!r} (one choice per call: run the agent K times instead)")
    if body.get("stream"):
        raise _unsupported("stream", "= true")
    for key in _UNSUPPORTED:
        if body.get(key) and not (key == "best_of" and body[key] == 1):
            raise _unsupported(key, "is set")
    if body.get("stop") not in (None, [], ""):
        raise _unsupported("stop", "is set (the model stops at its end-of-turn token)")
    for key in ("presence_penalty", "frequency_penalty"):
        if body.get(key) not in (None, 0, 0.0):
            raise _unsupported(key, f"= {body.get(key)!r}")
    if body.get("top_logprobs") not in (None, 0):
        raise _unsupported("top_logprobs", "is set")
    response_format = body.get("response_format")
    if response_format is not None and (not isinstance(response_format, dict) or response_format.get("type") != "text"):
        raise _unsupported("response_format", "asks for structured output")
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise _unsupported("tool_choice", f"= {choice!r} (only auto and none)")


def _tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The request's function tools (checked: a list of named function objects), or None."""
    tools = body.get("tools") or None
    if tools is not None and (
        not isinstance(tools, list)
        or not all(
            isinstance(t, dict)
            and t.get("type") == "function"
            and isinstance(t.get("function"), dict)
            and t["function"].get("name")
            for t in tools
        )
    ):
        raise EndpointError(
            400,
            "bad_request",
            '\'tools\' must be a list of {"type": "function", "function": {"name": ...}} objects',
            "tools",
        )
    return tools


def _reply(parsed: ParsedTurn, text: str) -> dict[str, Any]:
    """The assistant message: a turn with a call that cannot be read is answered as its raw text, with no
    tool calls (what an OpenAI-compatible server whose parser fails does)."""
    if parsed.malformed:
        return {"role": "assistant", "content": text, "tool_calls": None}
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _json(c.arguments)}}
        for c in parsed.calls
    ]
    return {
        "role": "assistant",
        "content": parsed.content if parsed.content or not calls else None,
        "tool_calls": calls or None,
    }


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


class CallBatcher:
    """The endpoint's generation thread: batches requests, renders, generates, parses, records."""

    def __init__(
        self,
        backend,
        tokenizer,
        params: SamplingParams,
        parser: str,
        template_kwargs: dict | None,
        max_context: int | None,
        policy_version: int,
        window_s: float = 0.005,
        live_episodes: Callable[[], int] | None = None,
    ):
        self.backend, self.tokenizer, self.params = backend, tokenizer, params
        self.parser, self.template_kwargs, self.max_context = get_parser(parser), template_kwargs, max_context
        self.policy_version, self.window_s = policy_version, window_s
        self.live_episodes = live_episodes  # how many episodes may still send a request (None: unknown)
        self.requests: queue.Queue[ChatRequest | None] = queue.Queue()
        self.batches: list[int] = []  # the size of every batch served (the bench reads it)
        self._thread = threading.Thread(target=self._loop, name="grouprl-agent-batcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.requests.put(None)
        self._thread.join(timeout=60)

    def submit(self, request: ChatRequest, wait_s: float) -> ChatRequest:
        self.requests.put(request)
        if not request.done.wait(wait_s):
            request.finish(
                *_error(EndpointError(503, "server_timeout", f"no answer within {wait_s:.0f} s", type_="server_error"))
            )
        return request

    def _loop(self) -> None:
        stopping = False
        while not stopping:
            first = self.requests.get()
            if first is None:
                return
            batch, deadline = [first], time.monotonic() + self.window_s
            while len(batch) < self.params.batch_size and not self._everyone_waits(batch):
                try:
                    item = self.requests.get(timeout=max(deadline - time.monotonic(), 0.0))
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            try:
                self._serve(batch)
            except Exception as err:  # noqa: BLE001 - a backend failure answers these requests, never kills the thread
                log.exception("agent endpoint: generation failed")
                failure = EndpointError(
                    500, "server_error", f"generation failed: {type(err).__name__}: {err}", type_="server_error"
                )
                for request in batch:
                    if not request.done.is_set():
                        _refuse(request, failure)

    def _everyone_waits(self, batch: list[ChatRequest]) -> bool:
        """Every episode that may still call has a request in this batch: waiting longer gains nothing."""
        return self.live_episodes is not None and len({id(r.episode) for r in batch}) >= self.live_episodes()

    def _serve(self, batch: list[ChatRequest]) -> None:
        self.batches.append(len(batch))
        ready: list[tuple[ChatRequest, str, list[int], bool]] = []
        for request in batch:
            try:
                ready.append((request, *self._render(request)))
            except EndpointError as err:
                _refuse(request, err)
        for cap in sorted({r.max_new_tokens for r, *_ in ready}):
            group = [entry for entry in ready if entry[0].max_new_tokens == cap]
            params = dataclasses.replace(self.params, max_new_tokens=cap)
            completions = self.backend.generate([ids for _, _, ids, _ in group], params)
            for (request, text, ids, extends), completion in zip(group, completions):
                self._answer(request, text, ids, extends, completion)

    def _render(self, request: ChatRequest) -> tuple[str, list[int], bool]:
        with request.episode.lock:
            earlier = list(request.episode.calls)
        try:
            text, ids, extends = render_call(
                self.tokenizer, earlier, request.messages, request.tools, self.template_kwargs
            )
        except Exception as err:  # noqa: BLE001 - the template refused these messages: the request's fault
            raise EndpointError(
                400,
                "bad_request",
                f"the chat template cannot render these messages: {type(err).__name__}: {err}",
                "messages",
            ) from None
        if self.max_context and len(ids) + request.max_new_tokens > self.max_context:
            raise EndpointError(
                400,
                "context_length_exceeded",
                f"this model's maximum context length is {self.max_context} tokens; the messages "
                f"are {len(ids)} tokens and max_tokens is {request.max_new_tokens}",
                "messages",
            )
        return text, ids, extends

    def _answer(self, request: ChatRequest, text: str, ids: list[int], extends: bool, completion) -> None:
        episode = request.episode
        parsed = parse_turn(completion.text, self.parser, len(episode.calls))
        if parsed.malformed:  # the agent sees the raw text; the step keeps the penalty (agent_calls)
            parsed = ParsedTurn(content=completion.text, malformed=parsed.malformed)
        reply = _reply(parsed, completion.text)
        latency = time.monotonic() - request.received
        record = CallRecord(
            request.messages, request.tools, text, ids, completion, parsed, reply, self.policy_version, extends, latency
        )
        with episode.lock:
            if episode.closed:
                episode.refused["episode_closed"] += 1
                request.finish(*_error(EndpointError(400, "episode_closed", "this episode has ended")))
                return
            episode.calls.append(record)
        finish = "length" if completion.truncated else "tool_calls" if parsed.calls else "stop"
        logprobs = None
        if request.want_logprobs and completion.logprobs is not None:
            logprobs = {
                "content": [
                    {"token": self.tokenizer.decode([t]), "logprob": lp, "bytes": None, "top_logprobs": []}
                    for t, lp in zip(completion.ids, completion.logprobs)
                ]
            }
        request.finish(
            200,
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": request.model,
                "choices": [{"index": 0, "message": reply, "finish_reason": finish, "logprobs": logprobs}],
                "usage": {
                    "prompt_tokens": len(ids),
                    "completion_tokens": len(completion.ids),
                    "total_tokens": len(ids) + len(completion.ids),
                },
            },
        )


def _error(err: EndpointError) -> tuple[int, dict[str, Any]]:
    return err.status, err.body()


def _refuse(request: ChatRequest, err: EndpointError) -> None:
    with request.episode.lock:
        request.episode.refused[err.kind] += 1
    request.finish(*_error(err))
