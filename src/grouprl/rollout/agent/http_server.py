"""The endpoint's HTTP layer: the standard library's threading server, bounded and under a read deadline.

At most ``max_connections`` connections are served at once (more are answered 503 unread, with no thread);
each request (line, headers, body) must arrive whole within ``read_deadline_s`` of the connection starting to
wait for it, or a reaper thread hangs the connection up and its thread ends; the handler checks the key and
the declared length from the headers before reading any body byte; ``server_close`` hangs up every
connection and joins its thread. What a request means is ``endpoint.AgentEndpoint``'s (``authorise``, then
``answer``). A streamed answer (``streaming.EventStream``) is sent as ``text/event-stream`` with
``Transfer-Encoding: chunked`` (one chunk per event, then the empty chunk), so the connection stays open for
the client's next request, as the ``openai`` client's pool expects.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from grouprl.rollout.agent.chat_request import EndpointError
from grouprl.rollout.agent.streaming import EventStream


class EndpointServer(ThreadingHTTPServer):
    """The threading server with its connections bounded, each request read under a deadline, and every
    connection closed and joined at ``server_close``."""

    request_queue_size = 1024  # every episode of a rollout may connect at once (the default backlog is 5)
    daemon_threads = False  # joined at server_close (block_on_close)
    block_on_close = True

    def __init__(self, address, handler, read_deadline_s: float, max_connections: int):
        super().__init__(address, handler)
        self.read_deadline_s, self.max_connections = read_deadline_s, max_connections
        self.waiting: dict[socket.socket, float] = {}  # connection -> since when it waits for (reads) a request
        self.open: set[socket.socket] = set()
        self.guard = threading.Lock()
        self.closing = threading.Event()
        self.reaper = threading.Thread(target=self._reap, name="grouprl-endpoint-reaper", daemon=True)
        self.reaper.start()

    def process_request(self, request, client_address):
        with self.guard:
            full = len(self.open) >= self.max_connections
            if not full:
                self.open.add(request)
        if full:  # answered here, unread: no thread for it
            try:
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def reading(self, conn: socket.socket, since: float | None) -> None:
        with self.guard:
            if since is None:
                self.waiting.pop(conn, None)
            else:
                self.waiting[conn] = since

    def forget(self, conn: socket.socket) -> None:
        with self.guard:
            self.waiting.pop(conn, None)
            self.open.discard(conn)

    def _reap(self) -> None:
        """Close every connection whose request has not arrived whole within the deadline (slow or silent)."""
        while not self.closing.wait(min(1.0, self.read_deadline_s / 4)):
            now = time.monotonic()
            with self.guard:
                late = [c for c, since in self.waiting.items() if now - since > self.read_deadline_s]
            for conn in late:
                _hang_up(conn)

    def server_close(self) -> None:
        self.closing.set()
        with self.guard:
            conns = list(self.open)
        for conn in conns:
            _hang_up(conn)
        super().server_close()  # joins the handler threads


def _hang_up(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


_BUSY_BODY = b'{"error": {"message": "too many connections", "code": "busy", "type": "busy"}}'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: " + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY
)


def handler_for(endpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the openai client reuses its connections
        server: EndpointServer

        def handle_one_request(self) -> None:
            self.server.reading(self.connection, time.monotonic())  # the request line and headers
            try:
                super().handle_one_request()
            except OSError:  # hung up by the reaper or the endpoint's close
                self.close_connection = True
            finally:
                self.server.reading(self.connection, None)

        def finish(self) -> None:
            try:
                super().finish()
            finally:
                self.server.forget(self.connection)

        def _answer(self, method: str) -> None:
            status, answer = self._respond(method)
            if isinstance(answer, EventStream):
                send_events(self, answer)
                return
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the agent gave up on this call (its timeout)
                self.close_connection = True

        def _respond(self, method: str) -> tuple[int, dict[str, Any] | EventStream]:
            return respond(endpoint, self, method)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._answer("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._answer("POST")

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - requests are not logged
            pass

    return Handler


def send_events(handler: BaseHTTPRequestHandler, answer: EventStream) -> None:
    """A streamed answer: ``text/event-stream``, one HTTP chunk per event, then the empty chunk."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Transfer-Encoding", "chunked")
    if handler.close_connection:
        handler.send_header("Connection", "close")
    handler.end_headers()
    try:
        for event in answer.events:
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        handler.wfile.write(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):  # the agent stopped reading the stream
        handler.close_connection = True


def respond(endpoint, handler: BaseHTTPRequestHandler, method: str) -> tuple[int, dict[str, Any] | EventStream]:
    """Headers first: the key and the declared length are checked before any body byte is read."""
    try:
        routed = endpoint.authorise(method, handler.path, handler.headers)
    except EndpointError as err:
        handler.close_connection = True  # its body, if any, is never read
        return err.status, err.body()
    try:
        length = int(handler.headers.get("Content-Length") or 0)
    except ValueError:
        length = -1
    if length < 0 or handler.headers.get("Transfer-Encoding"):
        handler.close_connection = True
        return 400, EndpointError(400, "bad_request", "a bad Content-Length header (or a chunked body)").body()
    if length > endpoint.max_request_bytes:
        handler.close_connection = True
        cap = endpoint.max_request_bytes
        return 413, EndpointError(413, "request_too_large", f"{length} bytes; at most {cap}").body()
    body = handler.rfile.read(length) if length else b""  # still under the reaper's deadline
    handler.server.reading(handler.connection, None)  # type: ignore[attr-defined]  # generation may take long: not a slow read
    if len(body) < length:
        handler.close_connection = True
        return 400, EndpointError(400, "bad_request", "the body ended before its Content-Length").body()
    return endpoint.answer(method, handler.path, routed, body)
