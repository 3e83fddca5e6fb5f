"""A turn may end on any of the model's stop ids, not only the template's end of turn (issue 32, class 1).

Qwen2.5's generation config stops on ``<|im_end|>`` and ``<|endoftext|>``; a model config may name an
ordinary token as eos too. Whichever stop id ends a turn, the conversation goes on through the template,
the stop token stays in the trained ids (it was sampled) and out of the turn's text (what the parser and
the judge read), and the episode packs into one sequence.
"""

import string

import pytest
import torch

from grouprl.models.tiny import build_tiny_model, build_tokenizer
from grouprl.rollout.conversation import ConversationSettings, run_conversation_episodes
from grouprl.rollout.generation import Completion, SamplingParams, stop_token_ids
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tasks.tool_arithmetic import ToolAnswerEnv, expert_reply, rows
from grouprl.tools import resolve_tools
from grouprl.train.conversation_samples import pack_conversations


@pytest.fixture(scope="module")
def stops(tokenizer):
    """The stop ids of a model configured like Qwen2.5 (end of turn, then <|endoftext|>), plus an ordinary
    token ("~") that a model's generation config names as an eos."""
    model = build_tiny_model(tokenizer, hidden=16, layers=1, heads=2)
    model.generation_config.eos_token_id = [
        tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>", "~")
    ]
    return stop_token_ids(tokenizer, model)


class StopsOn(ScriptedBackend):
    """The expert, ending each turn on ``stop`` instead of the tokenizer's eos (decoded as backends do)."""

    def __init__(self, tokenizer, stop: int):
        super().__init__(tokenizer, expert_reply)
        self.stop = stop

    def generate(self, prompt_ids, params):
        out = []
        for c in super().generate(prompt_ids, params):
            ids = c.ids if c.truncated else c.ids[:-1] + [self.stop]
            out.append(Completion(ids, self.tokenizer.decode(ids, skip_special_tokens=True), c.truncated))
        return out


def test_every_stop_id_ends_a_turn_and_the_conversation_goes_on(tokenizer, stops):
    assert len(stops) == 3
    task_rows = rows(4)
    settings = ConversationSettings(tools=resolve_tools(["calculator", "lookup"]))
    for stop in stops:
        factories = [lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows]
        episodes = run_conversation_episodes(
            factories,
            task_rows,
            1,
            StopsOn(tokenizer, stop),
            tokenizer,
            SamplingParams(max_new_tokens=200),
            settings,
            [r["seed"] for r in task_rows],
        )
        stop_text = tokenizer.decode([stop])
        assert all(ep.success and ep.end_reason == "answer" for ep in episodes), stop_text
        for ep in episodes:
            for step in ep.steps:
                assert step.action_ids[-1] == stop and not step.action_text.endswith(stop_text)
            for before, after in zip(ep.steps, ep.steps[1:]):  # each prompt extends the last, ids as generated
                assert after.prompt_ids[: len(before.prompt_ids) + len(before.action_ids)] == (
                    before.prompt_ids + before.action_ids
                )
                assert "<tool_response>" in tokenizer.decode(after.prompt_ids[len(before.prompt_ids) :])
        samples = pack_conversations(
            episodes, torch.ones(sum(len(ep.steps) for ep in episodes)), tokenizer.pad_token_id, mask_truncated=False
        )
        assert samples.batch.completion_mask.sum() == sum(len(s.action_ids) for ep in episodes for s in ep.steps)


def test_the_templates_end_of_turn_is_a_stop_id_where_no_eos_names_it():
    """A tokenizer whose eos is <|endoftext|>, a generation config that names only that: the ChatML template's
    <|im_end|> still stops a turn (else every turn runs on to max_new_tokens)."""
    tok = build_tokenizer(string.printable)
    tok.eos_token = "<|endoftext|>"
    model = build_tiny_model(tok, hidden=16, layers=1, heads=2)
    model.generation_config.eos_token_id = tok.eos_token_id
    stops = stop_token_ids(tok, model)
    assert stops == [tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")]


def test_the_vllm_server_backend_sends_and_reads_every_stop_id(tokenizer, stops, tmp_path):
    """The trainer's side of ``vllm_server``: the request carries every stop id, the server accepts the list,
    and a completion ending on any of them is a finished turn, not a truncated one."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from grouprl.rollout.backends.vllm_client import VLLMServerBackend
    from grouprl.rollout.backends.vllm_server import parse_generate

    seen = []

    class Engine(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(parse_generate(body)[2])
            ids = tokenizer("5", add_special_tokens=False)["input_ids"]
            data = json.dumps(
                {
                    "completions": [{"ids": ids + [s], "logprobs": None} for s in stops]
                    + [{"ids": ids, "logprobs": None}]
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        backend = VLLMServerBackend(tokenizer, port=server.server_address[1], weights_dir=str(tmp_path), stops=stops)
        completions = backend.generate([[1, 2]], SamplingParams(max_new_tokens=4))
    finally:
        server.shutdown()
        server.server_close()
    assert seen == [stops]
    assert [c.truncated for c in completions] == [False] * len(stops) + [True]
