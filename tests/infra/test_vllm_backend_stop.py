"""A stop string at the agent endpoint returns what vLLM's own stop handling returns for the same tokens.

The endpoint generates the turn to the model's end-of-turn token, then cuts it after the first token whose text
completes a stop string (``rollout/agent/chat_answer.py``). vLLM stops generation there itself and strips the
stop string from its text, as an OpenAI server does. Same tiny model, same engine, greedy: the endpoint's
content equals vLLM's text, its recorded ids are vLLM's ids, and finish_reason is "stop". Skipped where vLLM is
not installed; CI runs it in the vllm venv (``.ci/vllm-venv``)."""

from __future__ import annotations

import string

import pytest

pytest.importorskip("vllm", reason="vLLM not installed (pip install grouprl[vllm]; CI: .ci/vllm-venv)")

import openai  # noqa: E402

from grouprl.rollout.agent.endpoint import AgentEndpoint  # noqa: E402
from grouprl.rollout.backends.vllm import VLLMBackend, VLLMOptions  # noqa: E402
from grouprl.rollout.generation import SamplingParams  # noqa: E402

QUESTION = [{"role": "user", "content": "What is 2 * 3?"}]


def engine(tmp_path):
    """Built inside the test, as the other vLLM tests do: vLLM keeps process-wide parallel state, and an engine
    released later (a module fixture's, at teardown) tears it down under the next test's engine."""
    from transformers import AutoTokenizer

    from grouprl.models.tiny import init_tiny
    from grouprl.tools.chat_template import TOOL_CHAT_TEMPLATE

    path = init_tiny(string.printable, tmp_path / "tiny", hidden=128, layers=2, heads=4, seed=1)
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = TOOL_CHAT_TEMPLATE
    tok.save_pretrained(path)
    return VLLMBackend(str(path), tok, VLLMOptions(dtype="float32", max_model_len=512)), tok


def test_stop_strings_match_vllms_own(tmp_path):
    from vllm import SamplingParams as VLLMParams
    from vllm.inputs import TokensPrompt

    backend, tok = engine(tmp_path)
    params = SamplingParams(max_new_tokens=40, greedy=True)
    prompt = tok(
        tok.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False), add_special_tokens=False
    )
    (plain,) = backend.generate([prompt["input_ids"]], params)
    assert len(plain.text) > 12, plain.text
    for stop in (plain.text[5:7], plain.text[9:12]):  # strings the greedy turn is known to contain
        (theirs,) = backend.llm.generate(
            [TokensPrompt(prompt_token_ids=prompt["input_ids"])],
            VLLMParams(temperature=0.0, max_tokens=40, stop=[stop]),
            use_tqdm=False,
        )
        with AgentEndpoint(backend, tok, params, api_key="run", model_name="tiny") as served:
            record = served.open_episode("ep0")
            client = openai.OpenAI(base_url=served.base_url("ep0"), api_key=record.key, max_retries=0)
            ours = client.chat.completions.create(model="tiny", messages=QUESTION, stop=[stop]).choices[0]
        assert ours.message.content == theirs.outputs[0].text, stop
        assert ours.finish_reason == "stop" == theirs.outputs[0].finish_reason
        assert record.calls[0].completion.ids == list(theirs.outputs[0].token_ids)  # what trains: vLLM's ids
