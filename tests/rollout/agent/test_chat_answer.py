"""The request features that change what is answered and recorded, with the real ``openai`` client: stop
strings (cut after the completing token, never re-tokenised; the next call splits or merges by its ids),
forced tool calls (the opening recorded as prompt, not trained), ``parallel_tool_calls``, ``n`` samples
(one branch each), ``top_logprobs``, ``max_completion_tokens``."""

import itertools

import openai
import pytest

from grouprl.rollout.agent.calls import call_segments, calls_to_steps
from grouprl.rollout.agent.chat_answer import cut_at_stop
from grouprl.rollout.agent.endpoint import AgentEndpoint
from grouprl.rollout.generation import Completion, SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tools import resolve_tools

TOOLS = [t.schema for t in resolve_tools(["calculator", "lookup"])]
QUESTION = [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "What is 2 * 3?"}]
REACT = "Thought: add.\nObservation: fake\nmore"
CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2 * 3"}}\n</tool_call>'
TWO_CALLS = CALL + '\n<tool_call>\n{"name": "lookup", "arguments": {"key": "six"}}\n</tool_call>'


class Counted(ScriptedBackend):
    def __init__(self, tokenizer, reply):
        super().__init__(tokenizer, reply)
        self.batches: list[int] = []

    def generate(self, prompt_ids, params):
        self.batches.append(len(prompt_ids))
        return super().generate(prompt_ids, params)


def served(tokenizer, reply, **kw):
    backend = Counted(tokenizer, reply)
    return AgentEndpoint(
        backend, tokenizer, SamplingParams(max_new_tokens=200), api_key="k", model_name="tiny", **kw
    ), backend


def client(endpoint: AgentEndpoint, episode: str = "ep0") -> openai.OpenAI:
    return openai.OpenAI(base_url=endpoint.base_url(episode), api_key=endpoint.episode_key(episode), max_retries=0)


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_a_stop_string_cuts_the_recorded_ids_after_its_last_token_and_the_content_before_it(tokenizer):
    endpoint, _ = served(tokenizer, lambda prompt: REACT)
    with endpoint:
        record = endpoint.open_episode("ep0")
        answer = client(endpoint).chat.completions.create(model="tiny", messages=QUESTION, stop=["zzz", "Observation:"])
        single = client(endpoint).chat.completions.create(model="tiny", messages=QUESTION, stop="fake")
    choice = answer.choices[0]
    assert choice.finish_reason == "stop" and choice.message.content == "Thought: add."
    assert record.calls[0].completion.ids == ids(tokenizer, "Thought: add.\nObservation:")  # the generated ids, cut
    assert record.calls[0].completion.text == "Thought: add.\nObservation:" and record.calls[0].cut == "stop"
    assert not record.calls[0].completion.truncated
    assert answer.usage.completion_tokens == len(record.calls[0].completion.ids)
    assert single.choices[0].message.content == "Thought: add.\nObservation:"
    assert record.calls[1].completion.ids == ids(tokenizer, "Thought: add.\nObservation: fake")


def test_cut_at_stop_finds_the_first_completing_token_and_keeps_the_log_probs_in_step(tokenizer):
    tokens = ids(tokenizer, "abcSTOPdef")
    completion = Completion(tokens, "abcSTOPdef", False, [-float(k) for k in range(len(tokens))])
    cut, before = cut_at_stop(tokenizer, completion, ["STOP", "d"])
    assert before == "abc" and cut.ids == tokens[:7] and cut.logprobs == [-float(k) for k in range(7)]
    assert cut_at_stop(tokenizer, completion, ["xyz"]) is None and cut_at_stop(tokenizer, completion, []) is None


@pytest.mark.parametrize("handed_back, chains", [("Thought: add.", 2), ("Thought: add.\nObservation: 6", 1)])
def test_after_a_stop_cut_the_next_call_splits_or_merges_by_its_ids(tokenizer, handed_back, chains):
    """The agent hands back the content it got (the prompt does not hold the cut ids: a split) or writes the
    stop string and the observation after it (the prompt continues the cut ids token for token: a merge)."""
    endpoint, _ = served(tokenizer, lambda prompt: REACT)
    with endpoint:
        record = endpoint.open_episode("ep0")
        sdk = client(endpoint)
        sdk.chat.completions.create(model="tiny", messages=QUESTION, stop=["Observation:"])
        follow = [*QUESTION, {"role": "assistant", "content": handed_back}, {"role": "user", "content": "go on"}]
        sdk.chat.completions.create(model="tiny", messages=follow)
    assert not record.calls[1].extends  # rendered from the agent's messages, never grown from cut ids
    steps = calls_to_steps(record.calls, "turn", 0.0)
    assert len(call_segments(steps)) == chains


@pytest.mark.parametrize(
    "choice, opening, rest, name",
    [
        (
            {"type": "function", "function": {"name": "calculator"}},
            '<tool_call>\n{"name": "calculator", "arguments": ',
            '{"expression": "2 * 3"}}\n</tool_call>',
            "calculator",
        ),
        ("required", "<tool_call>\n", '{"name": "lookup", "arguments": {"key": "six"}}\n</tool_call>', "lookup"),
    ],
)
def test_a_forced_tool_call_opens_the_turn_as_prompt_ids_and_is_not_trained(tokenizer, choice, opening, rest, name):
    def reply(prompt: str) -> str:
        return rest if prompt.endswith(opening) else "The answer is 6."

    endpoint, _ = served(tokenizer, reply)
    with endpoint:
        record = endpoint.open_episode("ep0")
        sdk = client(endpoint)
        forced = sdk.chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS, tool_choice=choice)
        (call,) = forced.choices[0].message.tool_calls
        history = [*QUESTION, forced.choices[0].message.model_dump(exclude_none=True)]
        history.append({"role": "tool", "tool_call_id": call.id, "content": "6"})
        final = sdk.chat.completions.create(model="tiny", messages=history, tools=TOOLS)
    assert forced.choices[0].finish_reason == "tool_calls" and call.function.name == name
    text = tokenizer.apply_chat_template(QUESTION, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    first = record.calls[0]
    assert first.prompt_text == text + opening and first.prompt_ids == ids(tokenizer, text) + ids(tokenizer, opening)
    assert first.completion.ids == ids(tokenizer, rest) + [tokenizer.eos_token_id]  # the policy's own tokens only
    assert final.choices[0].message.content == "The answer is 6." and record.calls[1].extends
    steps = calls_to_steps(record.calls, "turn", 0.0)
    assert len(call_segments(steps)) == 1 and steps[0].action_ids == first.completion.ids


def test_parallel_tool_calls_false_answers_the_first_call_and_renders_the_next_call_afresh(tokenizer):
    endpoint, _ = served(tokenizer, lambda prompt: TWO_CALLS)
    with endpoint:
        record = endpoint.open_episode("ep0")
        sdk = client(endpoint)
        answer = sdk.chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS, parallel_tool_calls=False)
        both = sdk.chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS)
        (call,) = answer.choices[0].message.tool_calls
        history = [*QUESTION, answer.choices[0].message.model_dump(exclude_none=True)]
        sdk.chat.completions.create(
            model="tiny", messages=[*history, {"role": "tool", "tool_call_id": call.id, "content": "6"}], tools=TOOLS
        )
    assert call.function.name == "calculator" and len(both.choices[0].message.tool_calls) == 2
    assert (
        record.calls[0].cut == "parallel_tool_calls"
        and record.calls[0].completion.ids == record.calls[1].completion.ids
    )
    assert [c.name for c in record.calls[0].parsed.calls] == ["calculator"]
    assert not record.calls[2].extends  # the generated ids hold a call the agent never saw


def test_n_samples_share_one_generate_call_and_each_is_its_own_branch(tokenizer):
    replies = itertools.cycle(["First.", "Second.", "Third."])
    endpoint, backend = served(tokenizer, lambda prompt: next(replies), max_calls=4)
    with endpoint:
        record = endpoint.open_episode("ep0")
        sdk = client(endpoint)
        answer = sdk.chat.completions.create(model="tiny", messages=QUESTION, n=3)
        picked = answer.choices[1].message
        history = [*QUESTION, {"role": "assistant", "content": picked.content}, {"role": "user", "content": "more"}]
        sdk.chat.completions.create(model="tiny", messages=history)
        with pytest.raises(openai.BadRequestError) as err:  # 4 calls made: max_calls counts every sample
            sdk.chat.completions.create(model="tiny", messages=QUESTION)
    assert [c.message.content for c in answer.choices] == ["First.", "Second.", "Third."]
    assert [c.index for c in answer.choices] == [0, 1, 2] and backend.batches == [3, 1]
    assert len(record.calls) == 4 and len({tuple(c.prompt_ids) for c in record.calls[:3]}) == 1
    assert record.calls[3].extends and err.value.code == "max_calls_exceeded"
    assert answer.usage.completion_tokens == sum(len(c.completion.ids) for c in record.calls[:3])
    segments = call_segments(calls_to_steps(record.calls, "turn", 0.0))
    assert sorted(segments) == [[0], [1, 3], [2]]


class WithLogprobs(ScriptedBackend):
    def generate(self, prompt_ids, params):
        out = super().generate(prompt_ids, params)
        for completion in out:
            completion.logprobs = [-0.5] * len(completion.ids)
        return out


def test_top_logprobs_answers_the_sampled_token_and_a_backend_without_log_probs_answers_none(tokenizer):
    for backend, expect in (
        (WithLogprobs(tokenizer, lambda p: "six"), True),
        (ScriptedBackend(tokenizer, lambda p: "six"), False),
    ):
        endpoint = AgentEndpoint(backend, tokenizer, SamplingParams(max_new_tokens=20), api_key="k", model_name="tiny")
        with endpoint:
            endpoint.open_episode("ep0")
            answer = client(endpoint).chat.completions.create(
                model="tiny",
                messages=QUESTION,
                logprobs=True,
                top_logprobs=5,
                max_completion_tokens=2,
                user="u",
                metadata={"a": "b"},
                store=False,
                seed=3,
            )
        choice = answer.choices[0]
        assert choice.finish_reason == "length" and answer.usage.completion_tokens == 2
        if expect:
            assert [(t.token, [(a.token, a.logprob) for a in t.top_logprobs]) for t in choice.logprobs.content] == [
                ("s", [("s", -0.5)]),
                ("i", [("i", -0.5)]),
            ]
        else:
            assert choice.logprobs is None
