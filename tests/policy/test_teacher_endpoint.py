"""A teacher behind an OpenAI-compatible completions server (policy/teacher_endpoint.py), against a real server
on 127.0.0.1: a stdlib stand-in for vLLM's completions API (echo + logprobs) that scores with the tiny model.
Its log-probs equal the local teacher's; a server without prompt log-probs, or none at all, is one ConfigError
before training; a 503 is retried; a learner distils through it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from transformers import AutoModelForCausalLM

from grouprl.config import ConfigError
from grouprl.models.loading import load_policy
from grouprl.models.tiny import init_tiny
from grouprl.policy.scoring import pack
from grouprl.policy.teacher import teacher_logps
from grouprl.policy.teacher_endpoint import EndpointTeacher, prompt_logprobs
from grouprl.run_config import build_config
from grouprl.train.learner import Learner
from grouprl.train.step_samples import StepSamples

CORPUS = "0123456789+-*= abcdefgh"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = init_tiny(CORPUS, tmp_path_factory.mktemp("teacher") / "m", hidden=32, layers=1, heads=4, seed=2)
    return path, AutoModelForCausalLM.from_pretrained(path).eval()


def _serve(model, mode: str, failures: list[int]):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._reply(200, {"data": [{"id": "tiny-teacher"}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if failures and failures[0] > 0:
                failures[0] -= 1
                return self._reply(503, {"error": "busy"})
            if mode == "no_logprobs":
                return self._reply(200, {"choices": [{"text": "x", "logprobs": None}]})
            ids = body["prompt"]
            with torch.no_grad():
                logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
            echoed = [None] + [float(logp[i - 1, t]) for i, t in enumerate(ids) if i > 0]
            self._reply(200, {"choices": [{"text": "", "logprobs": {"token_logprobs": echoed + [-1.0]}}]})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


@pytest.fixture
def server(tiny, request):
    mode, failures = getattr(request, "param", ("ok", 0))
    srv, url = _serve(tiny[1], mode, [failures])
    yield url
    srv.shutdown()
    srv.server_close()


def _batch():
    return pack([[3, 4, 5]] * 2 + [[6, 7]] * 2, [[8, 9], [10], [11, 12, 13], [14]], pad_id=0)


@pytest.mark.parametrize("server", [("ok", 0), ("ok", 1)], indirect=True)
def test_the_endpoints_logps_equal_the_local_teachers_and_a_503_is_retried(tiny, server):
    teacher = EndpointTeacher(server, timeout=10, retries=2, backoff=0.01)
    teacher.check()
    assert teacher.model == "tiny-teacher"
    batch = _batch()
    mask = batch.completion_mask.bool()
    torch.testing.assert_close(teacher.logps(batch)[mask], teacher_logps(tiny[1], batch)[mask], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("server", [("no_logprobs", 0)], indirect=True)
def test_a_server_without_prompt_logprobs_is_refused_in_one_line(server):
    with pytest.raises(ConfigError, match="returned no prompt log-probs") as err:
        EndpointTeacher(server, timeout=10, retries=0).check()
    assert "\n" not in str(err.value)


def test_no_server_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="did not answer"):
        EndpointTeacher("http://127.0.0.1:9/v1", timeout=2, retries=0).check()


def test_vllm_prompt_logprobs_field_is_read():
    body = {"choices": [{"prompt_logprobs": [None, {"7": {"logprob": -0.5, "rank": 1}}]}]}
    assert prompt_logprobs(body, 2) == [0.0, -0.5]
    assert prompt_logprobs({"choices": [{}]}, 2) is None


def test_a_learner_distils_through_the_endpoint_and_full_vocabulary_objectives_are_refused(tmp_path, tiny, server):
    path = str(init_tiny(CORPUS, tmp_path / "student", hidden=32, layers=1, heads=4, seed=5))  # not the teacher
    base = {"task": "arithmetic", "output_dir": str(tmp_path), "device": "cpu", "max_new_tokens": 4}
    cfg = build_config(None, {**base, "teacher_endpoint": server, "distill_coef": 1.0}, environ={})
    policy = load_policy(cfg.model, path, torch.device("cpu"), need_reference=False)
    stats = Learner(cfg, policy).update(StepSamples(_batch(), torch.zeros(4)))
    assert stats["grad_norm"] > 0 and "distill/kl_mean" in stats and "distill/teacher_time" in stats
    cfg = build_config(
        None, {**base, "teacher_endpoint": server, "distill_coef": 1.0, "distill_objective": "jsd"}, environ={}
    )
    with pytest.raises(ConfigError, match="full-vocabulary"):
        Learner(cfg, policy)
