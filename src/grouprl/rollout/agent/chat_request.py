"""A chat-completion request as the agent endpoint serves it: checked, or refused as OpenAI refuses.

:func:`read_request` turns a request body into a :class:`ChatRequest` or raises an :class:`EndpointError`
(OpenAI's error schema: ``{"error": {"message", "type", "param", "code"}}``). Served: ``messages``,
``tools``, ``tool_choice`` (``auto``, ``none``, ``required``, a named function), ``parallel_tool_calls``,
``n``, ``stop``, ``stream`` (with ``stream_options.include_usage``), ``logprobs``/``top_logprobs``,
``max_tokens``/``max_completion_tokens`` (they only lower the run's ``max_new_tokens``). Read and ignored:
the sampling knobs (``temperature``, ``top_p``, ``seed``: the run's sampling produced the log-probs the
update corrects against, and the run seeds each call, ``serving.py``) and bookkeeping (``user``, ``metadata``,
``store``, ``service_tier``). Refused, naming the parameter: what the recorded sample could not show -- logit
biases, penalties, structured output (``response_format`` other than text), legacy ``functions``, audio, predicted
outputs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from grouprl.rollout.agent.calls import EpisodeCalls, normalise_messages

# request fields that change what is generated in ways the recorded sample could not show
_UNSUPPORTED = ("logit_bias", "functions", "function_call", "audio", "prediction", "best_of", "suffix", "echo")
MAX_N = 16  # samples per request
MAX_STOPS = 4  # stop strings per request, as OpenAI allows


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
    n: int = 1
    stop: list[str] = field(default_factory=list)
    tool_required: bool = False  # tool_choice "required" or a named function: the turn opens with a call
    tool_name: str | None = None  # tool_choice named this function
    parallel_tool_calls: bool = True  # False: only the turn's first call is answered
    top_logprobs: int = 0
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage
    params: dict[str, str] = field(default_factory=dict)  # what else the framework sent (grouprl agent check)
    received: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    status: int = 200
    answer: dict[str, Any] = field(default_factory=dict)

    def finish(self, status: int, answer: dict[str, Any]) -> None:
        self.status, self.answer = status, answer
        self.done.set()


def unsupported(param: str, why: str) -> EndpointError:
    return EndpointError(
        400,
        "unsupported_parameter",
        f"'{param}' {why}: the grouprl endpoint does not serve it "
        "(the recorded training sample could not show its effect)",
        param,
    )


def _bad(param: str, message: str) -> EndpointError:
    return EndpointError(400, "bad_request", message, param)


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
    tools = _tools(body)
    required, name = _tool_choice(body.get("tool_choice"), tools)
    try:
        messages = normalise_messages(body.get("messages"))
    except ValueError as err:
        raise _bad("messages", str(err)) from None
    cap_key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    cap = _positive(body, cap_key)
    options = body.get("stream_options") or {}
    return ChatRequest(
        episode,
        model,
        messages,
        None if body.get("tool_choice") == "none" else tools,
        min(cap or run_max_new_tokens, run_max_new_tokens),
        bool(body.get("logprobs")),
        n=_positive(body, "n", MAX_N) or 1,
        stop=_stops(body.get("stop")),
        tool_required=required,
        tool_name=name,
        parallel_tool_calls=body.get("parallel_tool_calls") is not False,
        top_logprobs=_top_logprobs(body.get("top_logprobs")),
        stream=bool(body.get("stream")),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        params=sent_params(body),
    )


def sent_params(body: dict[str, Any]) -> dict[str, str]:
    """The request's parameters other than its messages and tools, each value shortened: what a framework sent."""
    return {key: repr(value)[:60] for key, value in sorted(body.items()) if key not in ("messages", "tools", "input")}


def _positive(body: dict[str, Any], key: str, most: int | None = None) -> int | None:
    value = body.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise _bad(key, f"'{key}' must be a positive integer, got {value!r}")
    if value is not None and most is not None and value > most:
        raise _bad(key, f"'{key}' must be at most {most}, got {value!r}")
    return value


def _stops(stop: Any) -> list[str]:
    """``stop``: a string or a list of up to four non-empty strings."""
    stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) or len(stops) > MAX_STOPS:
        raise _bad("stop", f"'stop' must be a string or a list of at most {MAX_STOPS} strings")
    return [s for s in stops if s]


def _top_logprobs(value: Any) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 20:
        raise _bad("top_logprobs", f"'top_logprobs' must be an integer from 0 to 20, got {value!r}")
    return value


def _refuse_unsupported(body: dict[str, Any]) -> None:
    """An OpenAI-style 400 naming the first parameter this endpoint does not serve."""
    for key in _UNSUPPORTED:
        if body.get(key) and not (key == "best_of" and body[key] == 1):
            raise unsupported(key, "is set")
    for key in ("presence_penalty", "frequency_penalty"):
        if body.get(key) not in (None, 0, 0.0):
            raise unsupported(key, f"= {body.get(key)!r}")
    response_format = body.get("response_format")
    if response_format is not None and (not isinstance(response_format, dict) or response_format.get("type") != "text"):
        raise unsupported("response_format", "asks for structured output")
    modalities = body.get("modalities")
    if modalities not in (None, ["text"]):
        raise unsupported("modalities", f"= {modalities!r} (text only)")


def _tool_choice(choice: Any, tools: list[dict[str, Any]] | None) -> tuple[bool, str | None]:
    """(the turn must open with a call, the function it must call) for ``tool_choice``."""
    if choice in (None, "auto", "none"):
        return False, None
    if choice == "required":
        name = None
    elif (
        isinstance(choice, dict)
        and choice.get("type") == "function"
        and isinstance(choice.get("function"), dict)
        and isinstance(choice["function"].get("name"), str)
    ):
        name = choice["function"]["name"]
    else:
        raise unsupported("tool_choice", f"= {choice!r} (auto, none, required or a named function)")
    names = [t["function"]["name"] for t in tools or []]
    if name is None and not names:
        raise _bad("tool_choice", "'tool_choice' is 'required' but no 'tools' were sent")
    if name is not None and name not in names:
        raise _bad("tool_choice", f"'tool_choice' names the function {name!r}, which is not among 'tools'")
    return True, name


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
