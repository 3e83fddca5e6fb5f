"""The Responses API on the endpoint, with the real ``openai`` client (``responses.create``, streamed and not,
``responses.stream``) and the OpenAI Agents SDK's default model: converted to chat messages and recorded on
the chat-completions path, token for token."""

import asyncio

import openai
import pytest

from grouprl.rollout.agent.calls import call_segments, calls_to_steps
from grouprl.rollout.agent.endpoint import AgentEndpoint
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend

CALL = '<tool_call>\n{"name": "multiply", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
TOOL = {
    "type": "function",
    "name": "multiply",
    "description": "Multiply two integers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
}
CHAT_TOOL = {"type": "function", "function": {k: TOOL[k] for k in ("name", "description", "parameters")}}


def reply(prompt: str) -> str:
    """A hermes tool call, then (once the result is in the prompt) the answer."""
    return "The product is 6." if "<tool_response>" in prompt else CALL


def served(tokenizer) -> AgentEndpoint:
    backend = ScriptedBackend(tokenizer, reply)
    return AgentEndpoint(backend, tokenizer, SamplingParams(max_new_tokens=200), api_key="k", model_name="tiny")


def client(endpoint: AgentEndpoint, cls=openai.OpenAI):
    return cls(base_url=endpoint.base_url("ep0"), api_key=endpoint.episode_key("ep0"), max_retries=0, timeout=30)


def test_responses_create_answers_in_the_responses_schema_and_records_as_chat(tokenizer):
    endpoint = served(tokenizer)
    with endpoint:
        record = endpoint.open_episode("ep0")
        sdk = client(endpoint)
        first = sdk.responses.create(model="tiny", instructions="Use the tools.", input="What is 2 * 3?", tools=[TOOL])
        (call,) = first.output
        second = sdk.responses.create(
            model="tiny",
            instructions="Use the tools.",
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "6"}],
            tools=[TOOL],
        )
    assert first.object == "response" and first.status == "completed" and first.id.startswith("resp_")
    assert call.type == "function_call" and call.name == "multiply" and call.arguments == '{"a": 2, "b": 3}'
    assert second.output_text == "The product is 6." and second.output[0].type == "message"
    messages = [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "What is 2 * 3?"}]
    text = tokenizer.apply_chat_template(messages, tools=[CHAT_TOOL], add_generation_prompt=True, tokenize=False)
    assert record.calls[0].prompt_ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert first.usage.input_tokens == len(record.calls[0].prompt_ids)
    assert first.usage.output_tokens == len(record.calls[0].completion.ids)
    assert record.calls[1].extends and record.calls[1].messages[-1] == {
        "role": "tool",
        "tool_call_id": call.call_id,
        "content": "6",
    }
    assert len(call_segments(calls_to_steps(record.calls, "turn", 0.0))) == 1  # merged, token for token


def test_input_items_and_streaming_rebuild_the_same_response(tokenizer):
    items = [
        {"role": "system", "content": "Use the tools."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is 2 * 3?"}]},
        {"type": "function_call", "call_id": "c1", "name": "multiply", "arguments": '{"a": 2, "b": 3}'},
        {"type": "function_call_output", "call_id": "c1", "output": "6"},
    ]
    endpoint = served(tokenizer)
    with endpoint:
        record = endpoint.open_episode("ep0")
        sdk = client(endpoint)
        plain = sdk.responses.create(model="tiny", input=items, tools=[TOOL])
        events = list(sdk.responses.create(model="tiny", input=items, tools=[TOOL], stream=True))
        with sdk.responses.stream(model="tiny", input="What is 2 * 3?", tools=[TOOL]) as stream:
            called = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert {"response.output_item.added", "response.output_text.delta", "response.output_item.done"} <= set(kinds)
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == plain.output_text
    assert events[-1].response.output_text == plain.output_text == "The product is 6."
    (call,) = called.output
    assert call.type == "function_call" and call.arguments == '{"a": 2, "b": 3}' and called.output_text == ""
    assert record.calls[0].messages[2]["tool_calls"][0]["function"] == {
        "name": "multiply",
        "arguments": {"a": 2, "b": 3},
    }
    assert record.calls[0].prompt_ids == record.calls[1].prompt_ids  # streamed or not, the same prompt


@pytest.mark.parametrize(
    "extra, code",
    [
        ({"tools": [{"type": "web_search"}]}, "unsupported_parameter"),
        ({"previous_response_id": "resp_nope"}, "previous_response_not_found"),
        (
            {"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}},
            "unsupported_parameter",
        ),
        (
            {"input": [{"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "bad_request",
        ),
    ],
)
def test_what_the_responses_route_cannot_serve_is_refused_and_counted(tokenizer, extra, code):
    endpoint = served(tokenizer)
    with endpoint:
        record = endpoint.open_episode("ep0")
        with pytest.raises(openai.BadRequestError) as err:
            client(endpoint).responses.create(**{"model": "tiny", "input": "hi", **extra})
    assert err.value.code == code and record.refused == {code: 1} and not record.calls


@pytest.mark.parametrize("streamed", [False, True])
def test_the_openai_agents_sdk_drives_a_function_tool_through_the_endpoint(tokenizer, streamed):
    agents = pytest.importorskip("agents")
    seen = []

    @agents.function_tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        seen.append((a, b))
        return a * b

    endpoint = served(tokenizer)
    with endpoint:
        record = endpoint.open_episode("ep0")

        async def run():
            sdk = client(endpoint, openai.AsyncOpenAI)
            agents.set_default_openai_client(sdk, use_for_tracing=False)
            agents.set_tracing_disabled(True)
            agent = agents.Agent(name="calc", instructions="Use the tools.", tools=[multiply], model="tiny")
            if streamed:
                result = agents.Runner.run_streamed(agent, "What is 2 * 3?")
                async for _ in result.stream_events():
                    pass
            else:
                result = await agents.Runner.run(agent, "What is 2 * 3?")
            await sdk.close()
            return result.final_output

        final = asyncio.run(run())
    assert final == "The product is 6." and seen == [(2, 3)]
    assert len(record.calls) == 2 and not record.refused
    assert len(call_segments(calls_to_steps(record.calls, "turn", 0.0))) == 1


def test_a_stored_response_is_retrieved_by_id_in_its_own_episode_only(tokenizer):
    endpoint = served(tokenizer)
    with endpoint:
        record = endpoint.open_episode("ep0")
        endpoint.open_episode("ep1")
        sdk = client(endpoint)
        made = sdk.responses.create(model="tiny", input="What is 2 * 3?", tools=[TOOL])
        again = sdk.responses.retrieve(made.id)  # GET /v1/responses/<id>
        other = openai.OpenAI(base_url=endpoint.base_url("ep1"), api_key=endpoint.episode_key("ep1"), max_retries=0)
        with pytest.raises(openai.NotFoundError, match="no response"):
            other.responses.retrieve(made.id)  # another episode's response is not this one's to read
        with pytest.raises(openai.NotFoundError, match="no response"):
            sdk.responses.retrieve("resp_nope")
    assert again.model_dump() == made.model_dump()
    assert len(record.calls) == 1  # a retrieve is not a call: nothing generated, nothing recorded
    assert record.refused["response_not_found"] == 1
