"""A scripted OpenAI-compatible judge: a real HTTP server on 127.0.0.1 answering /v1/chat/completions.

No model that runs on this CPU grades arithmetic reliably, so the tests (tests/judge_standin.py: the pytest
fixture and the judge training helpers), the benchmarks (bench/rollouts/async_rollouts.py, bench/device) and the
worked example in docs/rewards.md that need a judge whose verdicts *mean* something use this one: it reads the
judge prompt grouprl rendered (the default templates' ``Question:`` / ``Response:`` blocks), works
the sum out and answers in the declared format. The judge's client, retries, cache and parsing are
grouprl's own and are exercised for real; only the grader behind the URL is a script.

Modes: ``arithmetic`` (pointwise ``SCORE: 10`` / ``SCORE: 0``; group: ``<n>: <score>`` lines), ``digits``
(partial credit for near misses: 10 x the share of the sum's digits in place), ``even`` (10 for an even
last digit: a criterion a small student model learns quickly),
``garbage`` (prose without a score). ``--delay`` seconds per answer; ``--concurrency N`` answers at most N
requests at a time (the others queue: a judge served one request at a time; 0, the default: no limit).
Every request is appended to
``--log`` (one JSON line: time, in-flight count, the body's fields but the model and messages), so a test
can count what reached the server.

    python -m bench.common.judge_standin --port 8123 [--mode arithmetic] [--delay 0.0] [--concurrency 0] [--log requests.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SUM = re.compile(r"(-?\d+(?:\s*[+\-]\s*\d+)+)")


def worked_out(question: str) -> int | None:
    match = SUM.search(question)
    return eval(match.group(1)) if match else None  # noqa: S307 - digits and +/- only (the regex)


def answered(text: str) -> int | None:
    numbers = re.findall(r"-?\d+", text)
    return int(numbers[-1]) if numbers else None


def grade(completion: str, truth: int | None, mode: str) -> int:
    """10 for the right sum; ``digits`` mode gives partial credit (10 x the share of the sum's digits in place,
    from the right), as a rubric judge grading near misses would; ``arithmetic`` mode gives 0."""
    given = answered(completion)
    if mode == "even":  # a taste a small student can learn: even last digits pass
        return 10 if given is not None and given % 2 == 0 else 0
    if given == truth:
        return 10
    if mode != "digits" or given is None or truth is None:
        return 0
    want, got = str(truth)[::-1], str(given)[::-1]
    return round(10 * sum(a == b for a, b in zip(want, got)) / max(len(want), len(got)))


def verdict(prompt: str, mode: str) -> str:
    if mode == "garbage":
        return "What a lovely question. I would rather talk about the weather today."
    question = prompt.split("Question:", 1)[-1].split("\n\n", 1)[0].strip()
    truth = worked_out(question)
    responses = re.findall(r"Response (\d+):\n(.*?)(?=\n\nResponse \d+:|\n\nReply with|\Z)", prompt, re.S)
    if responses:
        return "\n".join(f"{i}: {grade(c, truth, mode)}" for i, c in responses)
    completion = prompt.split("Response:\n", 1)[-1].split("\n\n", 1)[0]
    return f"Checked the sum.\nSCORE: {grade(completion, truth, mode)}"


class Handler(BaseHTTPRequestHandler):
    mode, delay, log_path = "arithmetic", 0.0, None
    slots: threading.Semaphore | None = None  # --concurrency: requests answered at a time
    lock = threading.Lock()
    in_flight = 0

    def log_message(self, *args):
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200, {"status": "ok"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        with Handler.lock:
            Handler.in_flight += 1
            in_flight = Handler.in_flight
        try:
            if self.log_path:
                with Handler.lock, open(self.log_path, "a") as fh:
                    fields = {k: v for k, v in body.items() if k not in ("model", "messages")}  # sampling, extras
                    fh.write(json.dumps({"t": time.time(), "in_flight": in_flight, "fields": fields}) + "\n")
            if self.slots is not None:
                with self.slots:
                    time.sleep(self.delay)
            else:
                time.sleep(self.delay)
            prompt = body["messages"][-1]["content"]
            text = verdict(prompt, self.mode)
            self._send(
                200,
                {
                    "id": "judge",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "judge"),
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                    ],
                    "usage": {
                        "prompt_tokens": len(prompt.split()),
                        "completion_tokens": len(text.split()),
                        "total_tokens": len(prompt.split()) + len(text.split()),
                    },
                },
            )
        finally:
            with Handler.lock:
                Handler.in_flight -= 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServedProcess:
    """A server command on 127.0.0.1 in its own process group: started (waiting for ``health``),
    killed with SIGKILL, and restarted on the same port (so a recipe's base_url stays valid).
    ``new_session=False`` keeps it in the caller's process group instead, so that whoever kills that group
    (bench/device/check.py's time cap on a part) kills the server with it."""

    def __init__(
        self,
        command: list[str],
        log: Path,
        port: int | None = None,
        health: str = "/health",
        startup_s: float = 120.0,
        env: dict[str, str] | None = None,
        new_session: bool = True,
    ):
        self.command, self.log, self.port, self.health, self.startup_s = (
            command,
            log,
            port or free_port(),
            health,
            startup_s,
        )
        self.env = env or {}  # on top of this process's environment
        self.new_session = new_session
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> str:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **self.env}
        argv = [a.replace("{port}", str(self.port)) for a in self.command]
        self.proc = subprocess.Popen(
            argv, stdout=self.log.open("ab"), stderr=subprocess.STDOUT, env=env, start_new_session=self.new_session
        )
        deadline = time.time() + self.startup_s
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{self.health}", timeout=1):
                    return self.base_url
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{argv[0]} exited: {self.log.read_text()[-2000:]}")
                time.sleep(0.2)
        raise RuntimeError(f"{argv[0]} did not answer {self.health} in {self.startup_s:.0f} s")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            if self.new_session:
                os.killpg(self.proc.pid, signal.SIGKILL)
            else:
                self.proc.kill()
            self.proc.wait()


def standin(
    log: Path,
    mode: str = "arithmetic",
    delay: float = 0.0,
    requests_log: Path | None = None,
    port: int | None = None,
    concurrency: int = 0,
    new_session: bool = True,
) -> ServedProcess:
    command = [
        sys.executable,
        __file__,
        "--port",
        "{port}",
        "--mode",
        mode,
        "--delay",
        str(delay),
        "--concurrency",
        str(concurrency),
    ]
    if requests_log is not None:
        command += ["--log", str(requests_log)]
    return ServedProcess(command, log, port, startup_s=30, new_session=new_session)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=["arithmetic", "digits", "even", "garbage"], default="arithmetic")
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--concurrency", type=int, default=0, help="requests answered at a time (0: no limit)")
    parser.add_argument("--log", default=None)
    args = parser.parse_args()
    Handler.mode, Handler.delay, Handler.log_path = args.mode, args.delay, args.log
    Handler.slots = threading.Semaphore(args.concurrency) if args.concurrency > 0 else None
    ThreadingHTTPServer.request_queue_size = 256  # the default backlog (5) drops connections under load
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
