"""``stream: true`` against the endpoint with the real ``openai`` client (sync, async and its ``stream()``
helper): the chunks rebuild exactly the unstreamed answer, and a streamed call is recorded exactly as the
same call unstreamed."""

import asyncio
import http.client
import json
import random

import openai
import pytest

from grouprl.rollout.agent.endpoint import AgentEndpoint
from grouprl.rollout.agent.streaming import chat_chunks, pieces
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tools import resolve_tools

TOOLS = [t.schema for t in resolve_tools(["calculator", "lookup"])]
QUESTION = [{"role": "user", "content": "What is 2 * 3?"}]
TWO_CALLS = (
    "Let me work it out step by step.\n"
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2 * 3"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "lookup", "arguments": {"key": "six"}}\n</tool_call>'
)


class Seeded(ScriptedBackend):
    """A scripted policy whose replies and log-probs come from a seeded generator."""

    def __init__(self, tokenizer, seed: int):
        self.rng = random.Random(seed)
        super().__init__(
            tokenizer, lambda prompt: " ".join(self.rng.choice(["six", "is", "2*3", "="]) for _ in range(9))
        )

    def generate(self, prompt_ids, params):
        out = super().generate(prompt_ids, params)
        for completion in out:
            completion.logprobs = [-self.rng.random() for _ in completion.ids]
        return out


def served(tokenizer, backend) -> AgentEndpoint:
    return AgentEndpoint(backend, tokenizer, SamplingParams(max_new_tokens=300), api_key="k", model_name="tiny")


def client(endpoint: AgentEndpoint, cls=openai.OpenAI):
    return cls(base_url=endpoint.base_url("ep0"), api_key=endpoint.episode_key("ep0"), max_retries=0, timeout=30)


def test_a_streamed_answer_rebuilds_the_unstreamed_one_content_and_tool_calls(tokenizer):
    endpoint = served(tokenizer, ScriptedBackend(tokenizer, lambda prompt: TWO_CALLS))
    with endpoint:
        record = endpoint.open_episode("ep0")
        sdk = client(endpoint)
        plain = sdk.chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS)
        chunks = list(
            sdk.chat.completions.create(
                model="tiny", messages=QUESTION, tools=TOOLS, stream=True, stream_options={"include_usage": True}
            )
        )
        with sdk.chat.completions.stream(model="tiny", messages=QUESTION, tools=TOOLS) as stream:
            helper = stream.get_final_completion()
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call = calls.setdefault(delta.index, {"id": delta.id, "name": delta.function.name, "arguments": ""})
            call["arguments"] += delta.function.arguments or ""
    message = plain.choices[0].message
    assert content == message.content == "Let me work it out step by step."
    assert [(c["name"], c["arguments"]) for c in calls.values()] == [
        (c.function.name, c.function.arguments) for c in message.tool_calls
    ]
    assert [c["id"] for c in calls.values()] == ["call_1_0", "call_1_1"]  # the second call of the episode
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1  # in pieces
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == plain.usage.total_tokens
    final = helper.choices[0]
    assert final.message.content == message.content and final.finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in final.message.tool_calls] == [
        (c.function.name, c.function.arguments) for c in message.tool_calls
    ]
    assert len(record.calls) == 3  # every streamed call recorded as one call


def test_a_streamed_call_records_exactly_the_ids_and_log_probs_of_the_unstreamed_one(tokenizer):
    recorded = []
    for stream in (False, True):
        endpoint = served(tokenizer, Seeded(tokenizer, seed=7))
        with endpoint:
            record = endpoint.open_episode("ep0")

            async def ask(endpoint=endpoint, stream=stream):
                sdk = client(endpoint, openai.AsyncOpenAI)
                answer = await sdk.chat.completions.create(
                    model="tiny", messages=QUESTION, stream=stream, logprobs=True, top_logprobs=2
                )
                if stream:
                    parts = [c async for c in answer]
                    text = "".join(c.choices[0].delta.content or "" for c in parts if c.choices)
                    logprobs = [
                        t.logprob
                        for c in parts
                        if c.choices and c.choices[0].logprobs
                        for t in c.choices[0].logprobs.content
                    ]
                else:
                    text, logprobs = (
                        answer.choices[0].message.content,
                        [t.logprob for t in answer.choices[0].logprobs.content],
                    )
                await sdk.close()
                return text, logprobs

            text, logprobs = asyncio.run(ask())
        (call,) = record.calls
        recorded.append((call.prompt_ids, call.completion.ids, call.completion.logprobs, text, logprobs))
    assert recorded[0] == recorded[1]
    assert recorded[0][2] == pytest.approx(recorded[0][4])  # the answered log-probs are the recorded ones


def test_the_stream_is_chunked_and_ends_with_done_on_a_kept_alive_connection(tokenizer):
    endpoint = served(tokenizer, ScriptedBackend(tokenizer, lambda prompt: "Answer: 6"))
    with endpoint:
        record = endpoint.open_episode("ep0")
        port = int(endpoint.url.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Authorization": f"Bearer {record.key}", "Content-Type": "application/json"}
        bodies = []
        for stream in (True, False):  # one connection: the streamed answer leaves it usable
            body = json.dumps({"model": "tiny", "messages": QUESTION, "stream": stream})
            conn.request("POST", "/ep/ep0/v1/chat/completions", body, headers)
            response = conn.getresponse()
            bodies.append(
                (response.getheader("Transfer-Encoding"), response.getheader("Content-Type"), response.read())
            )
        conn.close()
    assert bodies[0][:2] == ("chunked", "text/event-stream; charset=utf-8")
    events = bodies[0][2].decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""] and all(e.startswith("data: ") for e in events[:-1])
    assert json.loads(bodies[1][2])["choices"][0]["message"]["content"] == "Answer: 6"


def test_chunks_carry_every_choice_and_pieces_cover_the_text():
    assert pieces("abcdefghij") == ["abc", "def", "ghi", "j"] and pieces("") == [] and pieces("ab") == ["a", "b"]
    answer = {
        "id": "x",
        "created": 0,
        "model": "tiny",
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": f"c{i}", "tool_calls": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
            for i in range(2)
        ],
    }
    events = [json.loads(e.decode()[6:]) for e in chat_chunks(answer, include_usage=False).events[:-1]]
    for i in range(2):
        mine = [e["choices"][0] for e in events if e["choices"][0]["index"] == i]
        assert "".join(c["delta"].get("content", "") for c in mine) == f"c{i}" and mine[-1]["finish_reason"] == "stop"
    assert all("usage" not in e for e in events)
