"""The endpoint keeps episodes apart and reads safely, against a real server on 127.0.0.1 and raw sockets.

Episode integrity: a call is recorded only against the episode whose key it carries, only while that episode
is open. Reading: the key and the declared length are checked from the headers before any body byte is read;
bodies of any shape are a 400, never a 500; a slow client is hung up at the deadline; threads are bounded
and gone after the endpoint closes.
"""

import json
import socket
import threading
import time

import openai
import pytest

from grouprl.rollout.agent.endpoint import AgentEndpoint
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend

QUESTION = [{"role": "user", "content": "What is 2 * 3?"}]


def endpoint(tokenizer, **kw) -> AgentEndpoint:
    backend = ScriptedBackend(tokenizer, lambda prompt: "Answer: 6")
    return AgentEndpoint(backend, tokenizer, SamplingParams(max_new_tokens=20), api_key="run-key", **kw)


def ask(served: AgentEndpoint, route_episode: str, key: str) -> None:
    client = openai.OpenAI(base_url=served.base_url(route_episode), api_key=key, max_retries=0, timeout=30)
    client.chat.completions.create(model="policy", messages=QUESTION)


def raw(port: int, head: str, body: bytes = b"", timeout: float = 10.0) -> tuple[int, dict]:
    """Send ``head`` (+ ``body``), read one answer: (status, JSON body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(head.encode() + body)
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head_part, rest = data.split(b"\r\n\r\n", 1)
        length = int(next(h for h in head_part.split(b"\r\n") if h.lower().startswith(b"content-length")).split()[1])
        while len(rest) < length:
            rest += conn.recv(65536)
        return int(head_part.split()[1]), json.loads(rest[:length])


def post_head(episode: str, key: str | None, length: int) -> str:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (
        f"POST /ep/{episode}/v1/chat/completions HTTP/1.1\r\nHost: x\r\n{auth}"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    )


def test_each_episode_has_its_own_key_and_a_sibling_cannot_write_into_it(tokenizer):
    with endpoint(tokenizer) as served:
        mine, sibling = served.open_episode("g0-e0"), served.open_episode("g0-e1")
        assert mine.key != sibling.key and len(mine.key) > 40 and "g0" not in mine.key
        ask(served, "g0-e0", mine.key)
        with pytest.raises(openai.PermissionDeniedError) as err:
            ask(served, "g0-e1", mine.key)  # the sibling's guessable id, with my own key
        assert err.value.code == "episode_mismatch"
        with pytest.raises(openai.AuthenticationError):
            ask(served, "g0-e1", "run-key")  # the run's key serves no episode
    assert len(mine.calls) == 1 and sibling.calls == []
    assert mine.refused == {"episode_mismatch": 1} and sibling.refused == {}


def test_a_call_after_its_agent_returned_is_refused_and_never_recorded(tokenizer):
    with endpoint(tokenizer) as served:
        record = served.open_episode("ep0")
        ask(served, "ep0", record.key)
        served.close_episode("ep0")  # the runner closes it the moment the agent returns
        late = []

        def left_behind():  # a thread the agent started and did not wait for
            for _ in range(3):
                try:
                    ask(served, "ep0", record.key)
                except openai.BadRequestError as err:
                    late.append(err.code)

        thread = threading.Thread(target=left_behind)
        thread.start()
        thread.join(60)
    assert late == ["episode_closed"] * 3
    assert len(record.calls) == 1 and record.refused == {"episode_closed": 3}


def test_the_key_is_checked_before_the_body_is_read(tokenizer):
    with endpoint(tokenizer) as served:
        served.open_episode("ep0")
        port = int(served.url.rsplit(":", 1)[1])
        start = time.monotonic()
        status, answer = raw(port, post_head("ep0", None, 200 * 1024 * 1024))  # 200 MB declared, none sent
        assert status == 401 and answer["error"]["code"] == "invalid_api_key"
        assert time.monotonic() - start < 5  # answered at once: it did not wait for the 200 MB


def test_a_declared_length_over_the_cap_is_refused_unread(tokenizer):
    with endpoint(tokenizer, max_request_bytes=1024) as served:
        record = served.open_episode("ep0")
        port = int(served.url.rsplit(":", 1)[1])
        for length in (2048, 60 * 1024**3):  # over the cap; 60 GB
            status, answer = raw(port, post_head("ep0", record.key, length))
            assert status == 413 and answer["error"]["code"] == "request_too_large"
    assert record.calls == []


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,  # nested past the decoder's recursion limit
        b'{"model": "policy", "messages": [], "max_tokens": ' + b"9" * 5000 + b"}",  # past int's digit limit
        b'{"model": "policy", "messages": {"role": "user"}}',  # a shape read_request does not expect
        b'{"model": "policy", "messages": [{"role": "user", "content": {"a": 1}}]}',
        b"\xff\xfe not utf-8",
        b'"just a string"',
    ],
)
def test_a_body_of_any_shape_is_a_400_never_a_500(tokenizer, body):
    with endpoint(tokenizer) as served:
        record = served.open_episode("ep0")
        port = int(served.url.rsplit(":", 1)[1])
        status, answer = raw(port, post_head("ep0", record.key, len(body)), body)
    assert status == 400, answer
    assert record.calls == [] and sum(record.refused.values()) == 1


def _handler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if "process_request_thread" in t.name]


def test_a_slow_client_is_hung_up_and_no_thread_outlives_the_endpoint(tokenizer):
    before = len(_handler_threads())
    with endpoint(tokenizer, read_deadline_s=1.0, max_connections=4) as served:
        record = served.open_episode("ep0")
        port = int(served.url.rsplit(":", 1)[1])
        slow = socket.create_connection(("127.0.0.1", port), timeout=10)
        slow.sendall(b"POST /ep/ep0/v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # then trickles nothing more
        start = time.monotonic()
        assert slow.recv(1024) == b""  # the server hung up
        assert 0.5 < time.monotonic() - start < 6
        trickle = socket.create_connection(("127.0.0.1", port), timeout=10)
        trickle.sendall(post_head("ep0", record.key, 100).encode())
        start = time.monotonic()
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            for _ in range(50):  # a byte every 0.2 s: each read is quick, the request never completes
                trickle.sendall(b" ")
                time.sleep(0.2)
        assert time.monotonic() - start < 6
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(4)]
        time.sleep(0.3)
        status, answer = raw(port, post_head("ep0", record.key, 0))  # a fifth connection: over the bound
        assert status == 503 and answer["error"]["code"] == "busy"
    assert len(_handler_threads()) == before  # every handler thread joined at close
    for conn in [slow, trickle, *held]:
        conn.close()
    assert record.calls == []
