"""``grouprl dashboard``: a small local HTTP server over run folders.

The standard library's ``ThreadingHTTPServer`` is enough here: one person on localhost, a page
and a handful of JSON routes, no templates or sessions; it adds no dependency and starts in
milliseconds. The page polls the routes every few seconds, and each route reads only what
changed (metrics by line, rollouts by byte offset), so a training run can be watched live.

Routes (``i`` is the run's index in the command line's order):
  /                                    the app
  /api/runs                            overview of every run (config, summary, commands)
  /api/run/i/metrics?since=N           metrics.jsonl rows from row N on
  /api/run/i/steps                     steps with rollouts / trajectory files
  /api/run/i/rollouts?step=N           the rollout records of one step
  /api/run/i/trajectories?step=N       trajectories/step_N.jsonl
  /api/run/i/eval                      eval/before.jsonl and eval/after.jsonl
  /api/run/i/search?q=TEXT&from_step=N groups whose texts contain TEXT
"""

from __future__ import annotations

import errno
import json
import os
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

from grouprl.observe.dashboard.page import finite_json, render_page
from grouprl.observe.dashboard.run_folder import RunFolder, open_runs


class BadRequest(ValueError):
    pass


def _int_arg(query: dict[str, list[str]], name: str, default: int | None = None) -> int:
    values = query.get(name)
    if not values:
        if default is None:
            raise BadRequest(f"missing query parameter '{name}'")
        return default
    try:
        return int(values[0])
    except ValueError:
        raise BadRequest(f"query parameter '{name}' must be an integer, got {values[0]!r}") from None


def _routes(run: RunFolder, query: dict[str, list[str]]) -> dict[str, Callable[[], Any]]:
    return {
        "overview": run.overview,
        "metrics": lambda: run.metrics(_int_arg(query, "since", 0)),
        "steps": run.steps,
        "rollouts": lambda: run.rollouts.records(_int_arg(query, "step")),
        "trajectories": lambda: run.trajectories(_int_arg(query, "step")),
        "eval": run.eval_rows,
        "search": lambda: run.rollouts.search(
            (query.get("q") or [""])[0], _int_arg(query, "limit", 50), _int_arg(query, "from_step", -(1 << 62))
        ),
    }


def make_handler(runs: list[RunFolder], page: str) -> type[BaseHTTPRequestHandler]:
    page_bytes = page.encode("utf-8")

    class DashboardHandler(BaseHTTPRequestHandler):
        server_version = "grouprl-dashboard"

        def log_message(self, format: str, *args: Any) -> None:  # one line per request is noise here
            if os.environ.get("GROUPRL_DASHBOARD_LOG"):
                super().log_message(format, *args)

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, value: Any) -> None:
            body = json.dumps(finite_json(value), ensure_ascii=False, allow_nan=False, default=str).encode("utf-8")
            self._send(status, body, "application/json; charset=utf-8")

        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            url = urlparse(self.path)
            parts = [p for p in url.path.split("/") if p]
            try:
                if not parts or parts == ["index.html"]:
                    return self._send(HTTPStatus.OK, page_bytes, "text/html; charset=utf-8")
                if parts == ["api", "runs"]:
                    return self._json(HTTPStatus.OK, [r.overview() for r in runs])
                if len(parts) == 4 and parts[:2] == ["api", "run"] and parts[2].isdigit():
                    index = int(parts[2])
                    if index >= len(runs):
                        raise BadRequest(f"no run {index}: this dashboard shows {len(runs)} run(s)")
                    route = _routes(runs[index], parse_qs(url.query)).get(parts[3])
                    if route is not None:
                        return self._json(HTTPStatus.OK, route())
                self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {url.path}"})
            except BadRequest as err:
                self._json(HTTPStatus.BAD_REQUEST, {"error": str(err)})
            except (BrokenPipeError, ConnectionResetError):
                pass  # the browser went away mid-answer
            except Exception as err:  # noqa: BLE001 - a file the run is writing may be anything: answer, never hang up
                self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(err).__name__}: {err}"})

    return DashboardHandler


class DashboardServer:
    """The server over ``dirs``, bound to ``host:port`` (port 0 = any free port)."""

    def __init__(self, dirs: list[str], host: str = "127.0.0.1", port: int = 8765):
        if not 0 <= port <= 65535:  # the socket would raise OverflowError, not an OSError the CLI reports
            raise OSError(errno.EINVAL, f"port must be 0-65535, got {port}")
        self.runs = open_runs(dirs)
        title = "grouprl dashboard: " + ", ".join(r.name for r in self.runs)
        self.httpd = ThreadingHTTPServer((host, port), make_handler(self.runs, render_page(title, None)))
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}/"

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def start(self) -> "DashboardServer":
        """Serve from a background thread (tests, notebooks)."""
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
