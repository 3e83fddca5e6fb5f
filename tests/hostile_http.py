"""A real HTTP server on 127.0.0.1 (a thread of the test process) that answers chat completions badly.

The request's ``model`` names the behaviour:

* ``trickle``: a 200 whose declared body arrives one byte every 0.1 s (about 20 s in all);
* ``declared_huge``: a 200 declaring a 500 MB body;
* ``chunked_huge``: a 200 streaming 1 MB chunks, with no length, up to 300 MB (``sent`` counts the bytes);
* ``quote:<shape>``: a judge that grades every answer 0 and quotes the answer(s) it grades (the text
  between ``<<<`` and ``>>>`` in the prompt): ``last`` (its verdict, then the quote), ``first`` (the
  quote, then its verdict), ``cut`` (the quote only, ``finish_reason: length``);
* ``forced_digit``: ``7`` cut at ``max_tokens`` (a grade forced to one token);
* ``fail_marked``: no verdict for a prompt holding ``FAIL``, else ``SCORE: 10``;
* anything else: ``SCORE: 10`` / ``{"score": 10}`` / ``1: 10`` lines / ``10``, as the prompt asks.

The verdict's format follows the ``format:<fmt>`` word in the prompt.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MB = 1 << 20


def verdict(fmt: str, k: int, score: int) -> str:
    if fmt == "json":
        return json.dumps({"score": score}) if k == 0 else json.dumps({"scores": [score] * k})
    if fmt == "number":
        return str(score)
    return f"SCORE: {score}" if k == 0 else "\n".join(f"{i}: {score}" for i in range(1, k + 1))


def judge_reply(model: str, prompt: str) -> tuple[str, str]:
    fmt = re.search(r"format:(\w+)", prompt).group(1)
    answers = re.findall(r"<<<(.*?)>>>", prompt, re.S)
    k = len(answers) if "group" in prompt else 0
    if model == "forced_digit":  # a server forcing a one-token grade: cut at max_tokens=1 by design
        return "7", "length"
    if model == "fail_marked":  # no verdict for an answer marked FAIL
        return ("I cannot grade this." if "FAIL" in prompt else verdict(fmt, k, 10)), "stop"
    if not model.startswith("quote:"):
        return verdict(fmt, k, 10), "stop"
    quote = "\n".join(f"The response said:\n{a}" for a in answers)
    own = verdict(fmt, k, 0)
    shape = model.split(":", 1)[1]
    if shape == "last":
        return f"{own}\n{quote}", "stop"
    if shape == "first":
        return f"{quote}\n{own}", "stop"
    return quote, "length"


def _body(content: str, usage: str = '{"prompt_tokens": 1}') -> bytes:
    """A chat-completions body written by hand, so it can hold what json.dumps never writes."""
    return (
        '{"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": '
        + content
        + '}}], "usage": '
        + usage
        + "}"
    ).encode()


RAW_BODIES = {  # what a server controls in a reply: every one must end as that sample's error, never a crash
    "body_surrogate": _body('"SCORE: 7\\ud800"'.replace("\\\\", "\\")),
    "body_deep": _body('"SCORE: 7"', "[" * 5000 + "]" * 5000),
    "body_digits": _body('"SCORE: 7"', '{"prompt_tokens": 1' + "0" * 5000 + "}"),
    "body_nan": _body('"SCORE: 7"', '{"prompt_tokens": NaN}'),
    "verdict_deep": _body('"{\\"score\\": ' + "[" * 3000 + "]" * 3000 + '}"'),
    "verdict_digits": _body('"{\\"score\\": 1' + "0" * 5000 + '}"'),
    "verdict_surrogate": _body('"{\\"score\\": 7, \\"why\\": \\"\\\\ud800\\"}"'),
}


class Handler(BaseHTTPRequestHandler):
    sent = 0

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        model = body["model"]
        try:
            if model == "trickle":
                self._trickle()
            elif model == "declared_huge":
                self.send_response(200)
                self.send_header("Content-Length", str(500 * MB))
                self.end_headers()
                self.wfile.write(b"{" * MB)
            elif model == "chunked_huge":
                self._chunked()
            elif model in RAW_BODIES:
                self._raw(RAW_BODIES[model])
            else:
                text, reason = judge_reply(model, body["messages"][-1]["content"])
                self._send(
                    {
                        "choices": [
                            {"index": 0, "finish_reason": reason, "message": {"role": "assistant", "content": text}}
                        ]
                    }
                )
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up: what these tests want

    def _send(self, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _raw(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _trickle(self) -> None:
        data = json.dumps(
            {
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "SCORE: 10" + " " * 150},
                    }
                ]
            }
        )
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        for byte in data.encode():
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(0.1)

    def _chunked(self) -> None:
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b" " * MB
        for _ in range(300):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            Handler.sent += len(chunk)
        self.wfile.write(b"0\r\n\r\n")


class HostileServer:
    def __init__(self):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "HostileServer":
        Handler.sent = 0
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
