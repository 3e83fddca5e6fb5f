"""The OpenAI-compatible endpoint an agent drives the policy through, on 127.0.0.1 while rollouts run.

Routes:

- ``POST /ep/<episode-id>/v1/chat/completions`` -- a chat completion recorded against that episode
  (the runner hands each agent a client whose ``base_url`` is ``.../ep/<episode-id>/v1``);
  ``POST /v1/chat/completions`` does the same for the episode its key names (an ``X-Grouprl-Episode``
  header, if sent, must name that episode).
- ``POST /ep/<episode-id>/v1/responses`` (and ``/v1/responses``) -- the Responses API, converted to a chat
  completion and served and recorded on the same path (``responses.py``).
- ``GET /ep/<episode-id>/v1/responses/<id>`` (and ``/v1/responses/<id>``) -- a response this episode stored.
- ``GET /v1/models`` (and ``/ep/<episode-id>/v1/models``) -- the served model name and ``policy``.

Episode integrity: each episode has its own unguessable key (``Authorization: Bearer <key>``, handed to its
agent as ``api_key``). A call is recorded against the episode its key names, never another: a call with one
episode's key to another episode's route is refused (``episode_mismatch``, 403) and counted on the caller's
episode. An episode closes the moment its agent returns, fails or times out; every later call (a thread the
agent left behind) is refused with ``episode_closed`` and counted, never recorded. So what a sample trains on
is exactly the calls its own agent made while its episode was open.

Reading safely: the key is checked from the headers before any body byte is read; a declared
``Content-Length`` over ``max_request_bytes`` is refused unread (413) and the connection closed; a request
(its line, headers and body) must arrive within ``read_deadline_s`` of the connection starting to wait for it,
else the connection is closed and its thread reclaimed (a reaper thread enforces it, so a trickling client
cannot hold a thread); a body that is not JSON, of any shape (deeply nested, a 5,000-digit number), is a 400,
never a 500; at most ``max_connections`` connections are served at once (more: 503), and every connection is
closed and its thread joined when the endpoint closes.

The HTTP layer is the standard library's threading server (one thread per connection, HTTP/1.1 keep-alive,
as the ``openai`` client's pool expects); every request is checked here and in ``chat_request.read_request``, then
handed to the one generation thread (``serving.CallBatcher``), which batches concurrent requests into one
``backend.generate`` call; ``stream: true`` is answered with the same generated turn as server-sent events
(``streaming.py``). An episode that has made ``max_calls`` calls (``n`` samples count ``n``) is refused the next
one (``max_calls_exceeded``) and marked over its limit. A refused request whose key names an episode is counted
on it (``refused``), an unknown route (``route_not_found``) included.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
import threading
from typing import Any, Callable, TypeVar

from grouprl.rollout.agent import responses
from grouprl.rollout.agent.calls import EpisodeCalls
from grouprl.rollout.agent.chat_request import ChatRequest, EndpointError, read_request
from grouprl.rollout.agent.http_server import EndpointServer, handler_for
from grouprl.rollout.agent.run_progress import RunProgress
from grouprl.rollout.agent.serving import CallBatcher
from grouprl.rollout.agent.streaming import EventStream, chat_chunks, response_events
from grouprl.rollout.sampling import GenerationBackend, SamplingParams

log = logging.getLogger(__name__)
T = TypeVar("T")
Answer = dict[str, Any] | EventStream  # a JSON answer, or the events of a streamed one

EPISODE_HEADER = "X-Grouprl-Episode"
_ROUTE = re.compile(
    r"^(?:/ep/(?P<episode>[^/]+))?/v1/(?P<what>chat/completions|responses|models)(?:/(?P<stored>[\w-]+))?/?$"
)


class AgentEndpoint:
    """``with AgentEndpoint(...) as endpoint:`` serves until the block ends; ``open_episode`` before an
    agent runs, ``close_episode`` after (its record is then final)."""

    def __init__(
        self,
        backend: GenerationBackend,
        tokenizer,
        params: SamplingParams,
        *,
        api_key: str,
        model_name: str = "policy",
        parser: str = "hermes",
        template_kwargs: dict | None = None,
        max_context: int | None = None,
        max_calls: int = 16,
        policy_version: int = 0,
        window_s: float = 0.05,
        request_timeout_s: float = 600.0,
        max_request_bytes: int = 32 * 1024 * 1024,
        read_deadline_s: float = 60.0,
        max_connections: int = 256,
        draw_seed: int | None = None,
        progress: RunProgress | None = None,
    ):
        self.api_key, self.max_calls, self.params = api_key, max_calls, params
        self.max_request_bytes, self.read_deadline_s = max_request_bytes, read_deadline_s
        self.max_connections = max_connections
        self.model_names = tuple(dict.fromkeys([model_name, "policy"]))
        self.request_timeout_s = request_timeout_s
        self.batcher = CallBatcher(
            backend,
            tokenizer,
            params,
            parser,
            template_kwargs,
            max_context,
            policy_version,
            window_s,
            self.live_episodes,
            draw_seed=draw_seed,
            progress=progress,
        )
        self.episodes: dict[str, EpisodeCalls] = {}
        self._by_key: dict[bytes, EpisodeCalls] = {}  # sha256 of an episode's key -> the episode
        self._lock = threading.Lock()
        self._server: EndpointServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifetime -------------------------------------------------------------------------------------
    def __enter__(self) -> "AgentEndpoint":
        self.batcher.start()
        self._server = EndpointServer(("127.0.0.1", 0), handler_for(self), self.read_deadline_s, self.max_connections)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="grouprl-agent-endpoint",
            daemon=True,
        )
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:  # nothing more is recorded, whatever is still connected
            for record in self.episodes.values():
                with record.lock:
                    record.closed = True
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()  # every connection closed, its thread joined
        self.batcher.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "the endpoint serves only inside its with-block"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def base_url(self, episode_id: str) -> str:
        return f"{self.url}/ep/{episode_id}/v1"

    def open_episode(self, episode_id: str) -> EpisodeCalls:
        """A new episode and its own key (``record.key``: the api_key its agent must send)."""
        record = EpisodeCalls(episode_id, key="grouprl-ep-" + secrets.token_hex(24))
        with self._lock:
            self.episodes[episode_id] = record
            self._by_key[_digest(record.key)] = record
        return record

    def episode_key(self, episode_id: str) -> str:
        return self.episodes[episode_id].key

    def live_episodes(self) -> int:
        """Episodes whose agents run and may still call (the batcher flushes once all of them wait)."""
        with self._lock:
            return sum(e.started and not e.closed for e in self.episodes.values())

    def close_episode(self, episode_id: str) -> EpisodeCalls:
        """Its agent returned, failed or timed out: every later call is refused (``episode_closed``), never
        recorded; a call already generating when it closes is answered with that refusal too."""
        record = self.episodes[episode_id]
        with record.lock:
            record.closed = True
        return record

    # --- one request ----------------------------------------------------------------------------------
    def authorise(self, method: str, path: str, headers) -> tuple[str, EpisodeCalls | None]:
        """From the request line and headers alone (no body read yet): the route, and the episode the key
        names (None for the model list asked with the run's key). ``EndpointError`` otherwise."""
        match = _ROUTE.match(path.split("?", 1)[0])
        sent = headers.get("Authorization", "")
        with self._lock:
            episode = self._by_key.get(_digest(sent.removeprefix("Bearer "))) if sent.startswith("Bearer ") else None
        run_key = hmac.compare_digest(sent.encode(), f"Bearer {self.api_key}".encode())
        if episode is None and not (run_key and match is not None and match["what"] == "models"):
            raise EndpointError(401, "invalid_api_key", "incorrect API key provided", type_="authentication_error")
        if match is None or (match["stored"] and match["what"] != "responses"):
            unknown = EndpointError(
                404,
                "route_not_found",
                f"no route {method} {path}; try POST .../v1/chat/completions or .../v1/responses",
            )
            raise unknown if episode is None else self._refused(episode, unknown)
        if match["what"] == "models":
            return "models", None
        assert episode is not None
        named = match["episode"] or headers.get(EPISODE_HEADER)
        if named and named != episode.episode_id:
            raise self._refused(
                episode,
                EndpointError(403, "episode_mismatch", f"this key belongs to another episode than {named!r}"),
            )
        if match["stored"]:  # GET .../v1/responses/<id>: a response this episode stored
            return f"stored/{match['stored']}", episode
        return "responses" if match["what"] == "responses" else "chat", episode

    def answer(
        self, method: str, path: str, routed: tuple[str, EpisodeCalls | None], body: bytes
    ) -> tuple[int, Answer]:
        """(status, JSON answer) for an authorised request and its body; never raises."""
        try:
            return self._serve(method, path, *routed, body)
        except EndpointError as err:
            return err.status, err.body()
        except Exception as err:  # noqa: BLE001 - a bug here answers 500; it must not take the server down
            log.exception("agent endpoint: request failed")
            return 500, EndpointError(500, "server_error", f"{type(err).__name__}: {err}", type_="server_error").body()

    def _serve(
        self, method: str, path: str, what: str, episode: EpisodeCalls | None, body: bytes
    ) -> tuple[int, Answer]:
        if what == "models":
            if method != "GET":
                raise EndpointError(405, "method_not_allowed", f"{method} {path}: use GET")
            return 200, {
                "object": "list",
                "data": [
                    {"id": name, "object": "model", "created": 0, "owned_by": "grouprl"} for name in self.model_names
                ],
            }
        assert episode is not None
        if what.startswith("stored/"):
            return 200, self._stored(episode, method, path, what.removeprefix("stored/"))
        if method != "POST":
            raise self._refused(episode, EndpointError(405, "method_not_allowed", f"{method} {path}: use POST"))
        asked = payload = self._json(episode, body)
        items: list[dict[str, Any]] = []
        if what == "responses":
            payload, items = self._checked(episode, lambda: responses.chat_body(payload, episode))
        request = self._checked(
            episode, lambda: read_request(payload, episode, self.model_names, self.params.max_new_tokens)
        )
        self._admit(episode, request)
        served = self.batcher.submit(request, self.request_timeout_s)
        if served.status != 200:
            return served.status, served.answer
        if what == "responses":
            response = responses.response_object(asked, served.answer, items, episode)
            return 200, response_events(response) if request.stream else response
        return 200, chat_chunks(served.answer, request.include_usage) if request.stream else served.answer

    def _stored(self, episode: EpisodeCalls, method: str, path: str, response_id: str) -> dict[str, Any]:
        """``GET /v1/responses/<id>``: a response this episode was given (the Responses API's retrieve)."""
        if method != "GET":
            raise self._refused(episode, EndpointError(405, "method_not_allowed", f"{method} {path}: use GET"))
        with episode.lock:
            stored = episode.response_objects.get(response_id)
        if stored is None:
            raise self._refused(episode, EndpointError(404, "response_not_found", f"no response {response_id!r}"))
        return stored

    def _admit(self, episode: EpisodeCalls, request: ChatRequest) -> None:
        """Let the request through to the batcher, or refuse it: the episode has ended or made its calls."""
        with episode.lock:
            if episode.closed:
                episode.refused["episode_closed"] += 1
                raise EndpointError(400, "episode_closed", f"episode {episode.episode_id} has ended")
            if episode.admitted + request.n > self.max_calls:
                episode.refused["max_calls_exceeded"] += 1
                episode.over_limit = True
                raise EndpointError(
                    400,
                    "max_calls_exceeded",
                    f"episode {episode.episode_id} has made {episode.admitted} of its {self.max_calls} calls "
                    f"(max_calls); this request asks for {request.n}",
                )
            episode.admitted += request.n

    def _json(self, episode: EpisodeCalls, body: bytes) -> Any:
        """The body as JSON; a body that is not JSON (of any shape) is a 400, counted on the episode."""
        try:
            return json.loads(body or b"null")
        except (ValueError, RecursionError) as err:  # JSONDecodeError, bad UTF-8, a number past int's digit limit
            raise self._refused(episode, EndpointError(400, "bad_request", f"the body is not JSON: {err}"[:300]))

    def _checked(self, episode: EpisodeCalls, read: Callable[[], T]) -> T:
        """What ``read`` makes of the body; anything it cannot serve is a 400, counted on the episode."""
        try:
            return read()
        except EndpointError as err:
            raise self._refused(episode, err) from None
        except (TypeError, ValueError, AttributeError, KeyError, RecursionError) as err:
            bad = EndpointError(400, "bad_request", f"the request has an unexpected shape: {err}"[:300])
            raise self._refused(episode, bad) from None

    @staticmethod
    def _refused(episode: EpisodeCalls, err: EndpointError) -> EndpointError:
        with episode.lock:
            episode.refused[err.kind] += 1
        return err


def _digest(key: str) -> bytes:
    """Keys are looked up by their hash: a dict lookup on the secret itself would compare it byte by byte."""
    return hashlib.sha256(key.encode()).digest()
