"""The OpenAI-compatible endpoint an agent drives the policy through, on 127.0.0.1 while rollouts run.

Routes (every one needs ``Authorization: Bearer <the run's key>``):

- ``POST /ep/<episode-id>/v1/chat/completions`` -- a chat completion recorded against that episode
  (the runner hands each agent a client whose ``base_url`` is ``.../ep/<episode-id>/v1``);
  ``POST /v1/chat/completions`` with an ``X-Grouprl-Episode: <episode-id>`` header does the same.
- ``GET /v1/models`` (and ``/ep/<episode-id>/v1/models``) -- the served model name and ``policy``.

The HTTP layer is the standard library's threading server (one thread per connection, HTTP/1.1 keep-alive,
as the ``openai`` client's pool expects); every request is checked here and in
``agent_serving.read_request``, then handed to the one generation thread (``agent_serving.CallBatcher``),
which batches concurrent requests into one ``backend.generate`` call. An episode that has made
``max_calls`` calls is refused the next one (``max_calls_exceeded``) and marked over its limit; a
closed episode (ended, timed out) is refused everything.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from grouprl.rollout.agent.calls import EpisodeCalls
from grouprl.rollout.agent.serving import CallBatcher, EndpointError, read_request
from grouprl.rollout.sampling import GenerationBackend, SamplingParams

log = logging.getLogger(__name__)

EPISODE_HEADER = "X-Grouprl-Episode"
_ROUTE = re.compile(r"^(?:/ep/(?P<episode>[^/]+))?/v1/(?P<what>chat/completions|models)/?$")


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
        window_s: float = 0.005,
        request_timeout_s: float = 600.0,
    ):
        self.api_key, self.max_calls, self.params = api_key, max_calls, params
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
        )
        self.episodes: dict[str, EpisodeCalls] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifetime -------------------------------------------------------------------------------------
    def __enter__(self) -> "AgentEndpoint":
        self.batcher.start()
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="grouprl-agent-endpoint",
            daemon=True,
        )
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.batcher.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "the endpoint serves only inside its with-block"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def base_url(self, episode_id: str) -> str:
        return f"{self.url}/ep/{episode_id}/v1"

    def open_episode(self, episode_id: str) -> EpisodeCalls:
        with self._lock:
            self.episodes[episode_id] = record = EpisodeCalls(episode_id)
        return record

    def finish_episode(self, episode_id: str) -> None:
        """Its agent is done: the batcher stops waiting for it (a late request is still served until closed)."""
        with self._lock:
            self.episodes[episode_id].finished = True

    def live_episodes(self) -> int:
        """Episodes whose agents may still call (the batcher flushes once all of them wait)."""
        with self._lock:
            return sum(not (e.finished or e.closed) for e in self.episodes.values())

    def close_episode(self, episode_id: str) -> EpisodeCalls:
        record = self.episodes[episode_id]
        with record.lock:
            record.closed = True
        return record

    # --- one request ----------------------------------------------------------------------------------
    def handle(self, method: str, path: str, headers, body: bytes) -> tuple[int, dict[str, Any]]:
        """(status, JSON answer) for one HTTP request; never raises."""
        try:
            return self._route(method, path, headers, body)
        except EndpointError as err:
            return err.status, err.body()
        except Exception as err:  # noqa: BLE001 - a bug here answers 500; it must not take the server down
            log.exception("agent endpoint: request failed")
            return 500, EndpointError(500, "server_error", f"{type(err).__name__}: {err}", type_="server_error").body()

    def _route(self, method: str, path: str, headers, body: bytes) -> tuple[int, dict[str, Any]]:
        if not hmac.compare_digest(headers.get("Authorization", "").encode(), f"Bearer {self.api_key}".encode()):
            raise EndpointError(401, "invalid_api_key", "incorrect API key provided", type_="authentication_error")
        match = _ROUTE.match(path.split("?", 1)[0])
        if match is None:
            raise EndpointError(404, "not_found", f"no route {method} {path}; try POST .../v1/chat/completions")
        if match["what"] == "models":
            if method != "GET":
                raise EndpointError(405, "method_not_allowed", f"{method} {path}: use GET")
            return 200, {
                "object": "list",
                "data": [
                    {"id": name, "object": "model", "created": 0, "owned_by": "grouprl"} for name in self.model_names
                ],
            }
        if method != "POST":
            raise EndpointError(405, "method_not_allowed", f"{method} {path}: use POST")
        episode = self._episode(match["episode"] or headers.get(EPISODE_HEADER))
        try:
            parsed_body = json.loads(body or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise self._refused(episode, EndpointError(400, "bad_request", f"the body is not JSON: {err}")) from None
        try:
            request = read_request(parsed_body, episode, self.model_names, self.params.max_new_tokens)
        except EndpointError as err:
            raise self._refused(episode, err) from None
        with episode.lock:
            if episode.closed:
                episode.refused["episode_closed"] += 1
                raise EndpointError(400, "episode_closed", f"episode {episode.episode_id} has ended")
            if episode.admitted >= self.max_calls:
                episode.refused["max_calls_exceeded"] += 1
                episode.over_limit = True
                raise EndpointError(
                    400,
                    "max_calls_exceeded",
                    f"episode {episode.episode_id} has made its {self.max_calls} calls (max_calls)",
                )
            episode.admitted += 1
        served = self.batcher.submit(request, self.request_timeout_s)
        return served.status, served.answer

    def _episode(self, episode_id: str | None) -> EpisodeCalls:
        if not episode_id:
            raise EndpointError(
                400,
                "episode_missing",
                "no episode: use the base_url grouprl gave the agent "
                f"(.../ep/<episode-id>/v1) or set the {EPISODE_HEADER} header",
            )
        with self._lock:
            episode = self.episodes.get(episode_id)
        if episode is None:
            raise EndpointError(404, "episode_not_found", f"no episode {episode_id!r} is running")
        return episode

    @staticmethod
    def _refused(episode: EpisodeCalls, err: EndpointError) -> EndpointError:
        with episode.lock:
            episode.refused[err.kind] += 1
        return err


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # every episode of a rollout may connect at once (the default backlog is 5)
    daemon_threads = True


def _handler_for(endpoint: AgentEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the openai client reuses its connections

        def _answer(self, method: str) -> None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0:
                self.close_connection = True
                status, answer = 400, EndpointError(400, "bad_request", "a bad Content-Length header").body()
            else:
                body = self.rfile.read(length) if length else b""
                status, answer = endpoint.handle(method, self.path, self.headers, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the agent gave up on this call (its timeout)
                self.close_connection = True

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._answer("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._answer("POST")

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - requests are not logged
            pass

    return Handler
