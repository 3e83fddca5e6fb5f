"""The agent endpoint with the real ``openai`` client on 127.0.0.1: the OpenAI schema, token ids recorded
against the template's rendering, batching, and every request it refuses (as OpenAI errors, counted)."""

import asyncio

import openai
import pytest

from grouprl.rollout.agent.endpoint import EPISODE_HEADER, AgentEndpoint
from grouprl.rollout.agent.calls import calls_to_steps
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tools import resolve_tools

KEY = "test-key"
TOOLS = [t.schema for t in resolve_tools(["calculator", "lookup"])]
CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2 * 3"}}\n</tool_call>'
QUESTION = [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "What is 2 * 3?"}]


class Recorded(ScriptedBackend):
    """A scripted policy that records the size of every generate call (one per batch)."""

    def __init__(self, tokenizer, reply):
        super().__init__(tokenizer, reply)
        self.batches: list[int] = []

    def generate(self, prompt_ids, params):
        self.batches.append(len(prompt_ids))
        return super().generate(prompt_ids, params)


def endpoint(tokenizer, reply=lambda prompt: CALL, **kw):
    backend = Recorded(tokenizer, reply)
    kw = {"api_key": KEY, "model_name": "tiny", **kw}
    return AgentEndpoint(backend, tokenizer, SamplingParams(max_new_tokens=200), **kw), backend


def client(served: AgentEndpoint, episode: str = "ep0", key: str | None = None) -> openai.OpenAI:
    """A client of ``episode`` holding that episode's own key (or ``key``)."""
    key = key or (served.episode_key(episode) if episode in served.episodes else KEY)
    return openai.OpenAI(base_url=served.base_url(episode), api_key=key, max_retries=0)


def test_a_call_is_answered_in_the_openai_schema_and_recorded_token_for_token(tokenizer):
    served, _ = endpoint(tokenizer)
    with served:
        record = served.open_episode("ep0")
        response = client(served).chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "calculator"
    assert call.function.arguments == '{"expression": "2 * 3"}'  # a JSON string, as OpenAI sends it
    text = tokenizer.apply_chat_template(QUESTION, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    expected = tokenizer(text, add_special_tokens=False)["input_ids"]
    (recorded,) = record.calls
    assert recorded.prompt_ids == expected and recorded.prompt_text == text
    assert recorded.completion.ids == tokenizer(CALL, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert response.usage.prompt_tokens == len(expected)
    assert response.usage.completion_tokens == len(recorded.completion.ids)
    assert response.usage.total_tokens == len(expected) + len(recorded.completion.ids)
    assert recorded.policy_version == 0 and recorded.latency_s > 0


def test_models_auth_episode_routing(tokenizer):
    served, _ = endpoint(tokenizer)
    with served:
        served.open_episode("ep0")
        assert sorted(m.id for m in client(served).models.list().data) == ["policy", "tiny"]
        with pytest.raises(openai.AuthenticationError) as err:
            client(served, key="wrong").models.list()
        assert err.value.code == "invalid_api_key"
        assert sorted(m.id for m in client(served, key=KEY).models.list().data) == ["policy", "tiny"]  # run key
        with pytest.raises(openai.PermissionDeniedError) as err:  # ep0's key on another episode's route
            client(served, "nobody", key=served.episode_key("ep0")).chat.completions.create(
                model="tiny", messages=QUESTION
            )
        assert err.value.code == "episode_mismatch"
        with pytest.raises(openai.AuthenticationError) as err:  # the run's key serves no episode
            client(served, key=KEY).chat.completions.create(model="tiny", messages=QUESTION)
        assert err.value.code == "invalid_api_key"
        # the episode in a header instead of the path (or named by the key alone); "policy" names the model too
        key = served.episode_key("ep0")
        plain = openai.OpenAI(
            base_url=f"{served.url}/v1", api_key=key, max_retries=0, default_headers={EPISODE_HEADER: "ep0"}
        )
        assert plain.chat.completions.create(model="policy", messages=QUESTION).model == "policy"
        bare = openai.OpenAI(base_url=f"{served.url}/v1", api_key=key, max_retries=0)
        assert bare.chat.completions.create(model="tiny", messages=QUESTION).model == "tiny"
        assert len(served.episodes["ep0"].calls) == 2
        assert served.episodes["ep0"].refused == {"episode_mismatch": 1}


@pytest.mark.parametrize(
    "extra, status, code",
    [
        ({"model": "gpt-4o"}, openai.NotFoundError, "model_not_found"),
        ({"n": 0}, openai.BadRequestError, "bad_request"),
        ({"stream": True, "n": 17}, openai.BadRequestError, "bad_request"),  # refused before any byte streams
        ({"stop": ["a", "b", "c", "d", "e"]}, openai.BadRequestError, "bad_request"),
        ({"logit_bias": {"5": 10}}, openai.BadRequestError, "unsupported_parameter"),
        ({"presence_penalty": 0.5}, openai.BadRequestError, "unsupported_parameter"),
        ({"tool_choice": "required"}, openai.BadRequestError, "bad_request"),  # no tools to call
        (
            {"tool_choice": {"type": "function", "function": {"name": "search"}}, "tools": TOOLS},
            openai.BadRequestError,
            "bad_request",
        ),
        ({"response_format": {"type": "json_object"}}, openai.BadRequestError, "unsupported_parameter"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}},
            openai.BadRequestError,
            "unsupported_parameter",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            openai.BadRequestError,
            "bad_request",
        ),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, openai.BadRequestError, "bad_request"),
        ({"max_tokens": 0}, openai.BadRequestError, "bad_request"),
    ],
)
def test_requests_it_cannot_serve_are_openai_errors_and_counted(tokenizer, extra, status, code):
    served, backend = endpoint(tokenizer)
    with served:
        record = served.open_episode("ep0")
        body = {"model": "tiny", "messages": QUESTION, **extra}
        with pytest.raises(status) as err:
            if body.pop("stream", False):
                client(served).chat.completions.create(**body, stream=True)
            else:
                client(served).chat.completions.create(**body)
    assert err.value.code == code and err.value.body["type"] == "invalid_request_error"
    assert record.refused == {code: 1} and not record.calls and backend.batches == []


def test_a_context_over_the_limit_is_refused(tokenizer):
    served, backend = endpoint(tokenizer, max_context=300)
    with served:
        record = served.open_episode("ep0")
        with pytest.raises(openai.BadRequestError) as err:
            client(served).chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS)
        assert err.value.code == "context_length_exceeded" and "300 tokens" in err.value.message
        # without the tool schemas the prompt fits, and max_tokens lowers the run's cap
        response = client(served).chat.completions.create(model="tiny", messages=QUESTION, max_tokens=5)
    assert response.choices[0].finish_reason == "length" and response.usage.completion_tokens == 5
    assert record.refused == {"context_length_exceeded": 1} and len(record.calls) == 1


def test_malformed_tool_call_json_reaches_the_agent_as_text(tokenizer):
    bad = '<tool_call>\n{"name": "calculator", "arguments": {"expression": 2 *}\n</tool_call>'
    served, _ = endpoint(tokenizer, reply=lambda prompt: bad)
    with served:
        record = served.open_episode("ep0")
        response = client(served).chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS)
    choice = response.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls and choice.message.content == bad
    (step,) = calls_to_steps(record.calls, "tool_state", invalid_penalty=0.25)
    assert not step.valid and step.penalty == 0.25 and "not valid JSON" in step.invalid_reason


def test_calls_past_max_calls_are_refused_and_mark_the_episode(tokenizer):
    served, _ = endpoint(tokenizer, max_calls=2)
    with served:
        record = served.open_episode("ep0")
        for _ in range(2):
            client(served).chat.completions.create(model="tiny", messages=QUESTION)
        with pytest.raises(openai.BadRequestError) as err:
            client(served).chat.completions.create(model="tiny", messages=QUESTION)
        served.close_episode("ep0")
        with pytest.raises(openai.BadRequestError) as closed:
            client(served).chat.completions.create(model="tiny", messages=QUESTION)
    assert err.value.code == "max_calls_exceeded" and closed.value.code == "episode_closed"
    assert record.over_limit and len(record.calls) == 2
    assert record.refused == {"max_calls_exceeded": 1, "episode_closed": 1}


def test_concurrent_requests_share_one_generate_call(tokenizer):
    served, backend = endpoint(tokenizer, window_s=0.05)
    with served:
        for i in range(16):
            served.open_episode(f"ep{i}")

        async def all_at_once():
            clients = [
                openai.AsyncOpenAI(
                    base_url=served.base_url(f"ep{i}"), api_key=served.episode_key(f"ep{i}"), max_retries=0
                )
                for i in range(16)
            ]
            answers = await asyncio.gather(
                *(c.chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS) for c in clients)
            )
            for c in clients:
                await c.close()
            return answers

        answers = asyncio.run(all_at_once())
    assert all(a.choices[0].message.tool_calls for a in answers)
    assert sum(backend.batches) == 16 and max(backend.batches) > 1  # batched, each request generated once
    assert all(len(served.episodes[f"ep{i}"].calls) == 1 for i in range(16))


class WithLogprobs(Recorded):
    """An engine that reports per-token log-probs (as vLLM does): -0.1 * position."""

    def generate(self, prompt_ids, params):
        out = super().generate(prompt_ids, params)
        for completion in out:
            completion.logprobs = [-0.1 * k for k in range(len(completion.ids))]
        return out


def test_the_engine_s_log_probs_are_recorded_and_answered_when_asked(tokenizer):
    from grouprl.rollout.agent.calls import calls_to_steps

    backend = WithLogprobs(tokenizer, lambda prompt: "Answer: 6")
    served = AgentEndpoint(backend, tokenizer, SamplingParams(max_new_tokens=50), api_key=KEY, model_name="tiny")
    with served:
        record = served.open_episode("ep0")
        asked = client(served).chat.completions.create(model="tiny", messages=QUESTION, logprobs=True)
        plain = client(served).chat.completions.create(
            model="tiny", messages=QUESTION, tool_choice="none", tools=TOOLS, temperature=0.0, seed=1
        )
    tokens = asked.choices[0].logprobs.content
    assert [t.logprob for t in tokens] == pytest.approx([-0.1 * k for k in range(len(tokens))])
    assert "".join(t.token for t in tokens) == "Answer: 6<|im_end|>"
    assert plain.choices[0].logprobs is None and plain.choices[0].message.content == "Answer: 6"
    assert record.calls[1].tools is None  # tool_choice none: the tools are not rendered
    steps = calls_to_steps(record.calls, "turn", 0.0)
    assert all(s.logprobs == pytest.approx([-0.1 * k for k in range(len(s.action_ids))]) for s in steps)


def test_raw_http_bad_bodies_get_json_errors(tokenizer):
    import http.client
    import json

    served, _ = endpoint(tokenizer)
    with served:
        record = served.open_episode("ep0")
        port = int(served.url.rsplit(":", 1)[1])
        answers = []
        for body, headers in [(b"{not json", {}), (b"{}", {"Content-Length": "nope"})]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.putrequest("POST", "/ep/ep0/v1/chat/completions")
            auth = {"Authorization": f"Bearer {record.key}", "Content-Length": str(len(body)), **headers}
            for key, value in auth.items():
                conn.putheader(key, value)
            conn.endheaders(body)
            response = conn.getresponse()
            answers.append((response.status, json.loads(response.read())["error"]["code"]))
            conn.close()
    assert answers == [(400, "bad_request"), (400, "bad_request")]
    assert record.refused == {"bad_request": 1}  # the second never reached an episode


def test_the_batcher_stops_waiting_once_every_live_episode_has_asked(tokenizer):
    import time

    served, backend = endpoint(tokenizer, window_s=30.0)  # a window no test would sit through
    with served:
        served.open_episode("ep0")
        served.open_episode("ep1")
        served.close_episode("ep1")  # its agent is done: only ep0 may still call
        start = time.monotonic()
        client(served).chat.completions.create(model="tiny", messages=QUESTION)
        assert time.monotonic() - start < 10
        assert served.live_episodes() == 1 and backend.batches == [1]


def test_an_unknown_route_is_a_404_counted_on_the_episode_its_key_names(tokenizer):
    import http.client
    import json

    served, backend = endpoint(tokenizer)
    with served:
        record = served.open_episode("ep0")
        port = int(served.url.rsplit(":", 1)[1])
        answers = []
        for path, key in [
            ("/ep/ep0/v1/completions", record.key),
            ("/v1/embeddings", record.key),
            ("/v1/embeddings", "nobody's"),  # no episode to count it on: a 401
        ]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("POST", path, b"{}", {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
            response = conn.getresponse()
            answers.append((response.status, json.loads(response.read())["error"]["code"]))
            conn.close()
        with pytest.raises(openai.NotFoundError) as err:
            client(served).completions.create(model="tiny", prompt="2 * 3 =")
    assert answers == [(404, "route_not_found"), (404, "route_not_found"), (401, "invalid_api_key")]
    assert err.value.code == "route_not_found"
    assert record.refused == {"route_not_found": 3} and not record.calls and backend.batches == []
