"""``grouprl vllm-serve`` (a real vLLM CPU engine in its own process) and its client backend
``generation_backend: vllm_server``: valid completions, weights pushed through a safetensors file
(the server's sampling log-probs follow the trainer's), refused requests, an unreachable server, and
two GRPO steps against the server.

Skipped where vLLM is not installed; CI runs it in the venv made by ``.ci/vllm-venv``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM not installed (pip install grouprl[vllm]; CI: .ci/vllm-venv)")

from launch import torchrun  # noqa: E402
from vllm_steps import TRAIN, two_steps_follow_the_trainer, wait_until_served  # noqa: E402

from grouprl.run_config import build_config  # noqa: E402
from grouprl.models.loading import load_policy, load_tokenizer  # noqa: E402
from grouprl.policy.scoring import completion_logps, pack  # noqa: E402
from grouprl.models.tiny import init_tiny  # noqa: E402
from grouprl.rollout.backends.vllm_client import VLLMServerBackend, VLLMServerError  # noqa: E402
from grouprl.rollout.generation import SamplingParams  # noqa: E402
from grouprl.tasks import load_task  # noqa: E402
from grouprl.train.trainer import Trainer  # noqa: E402

LOGPROB_TOL = 1e-3  # as tests/infra/test_vllm_backend.py: fp32 engine vs fp32 trainer, measured max |diff| ~5e-5
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    """This checkout's grouprl in the subprocesses, one torch thread each (the test machine is shared)."""
    return dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])), OMP_NUM_THREADS="1"
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One ``grouprl vllm-serve`` subprocess on a tiny arithmetic model (head_dim 32: vLLM CPU attention)."""
    root = tmp_path_factory.mktemp("vllm_server")
    task = load_task(build_config(None, dict(TRAIN, output_dir=str(root / "cfg")), environ={}))
    path = init_tiny(task.tokenizer_corpus(), root / "model", hidden=128, layers=2, heads=4, seed=0)
    port = _free_port()
    log = root / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "grouprl.cli",
                "vllm-serve",
                "--model",
                str(path),
                "--port",
                str(port),
                "--dtype",
                "float32",
                "--max_model_len",
                "256",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(),
        )
    try:
        client = VLLMServerBackend(load_tokenizer(str(path)), port=port)
        wait_until_served(proc, client, log)
        assert f"ready at http://127.0.0.1:{port}" in log.read_text()
        yield client, path, port, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _prompts(tok) -> list[list[int]]:
    texts = [
        tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        for q in ("What is 2+3?", "What is 12*4?", "What is 7-9?")
        for _ in range(2)
    ]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def _max_logprob_gap(model, prompts, completions) -> float:
    batch = pack(prompts, [c.ids for c in completions], 0)
    with torch.no_grad():
        ours, _ = completion_logps(model, batch)
    theirs = torch.tensor([c.logprobs + [0.0] * (ours.size(1) - len(c.ids)) for c in completions])
    return float((ours - theirs)[batch.completion_mask.bool()].abs().max())


def test_completions_are_valid(server):
    client, _, _, _ = server
    tok = client.tokenizer
    prompts = _prompts(tok)
    comps = client.generate(prompts, SamplingParams(max_new_tokens=12, temperature=1.0))
    assert len(comps) == len(prompts)
    for c in comps:
        assert 1 <= len(c.ids) <= 12 and all(0 <= t < len(tok) for t in c.ids), c.ids
        assert c.truncated == (tok.eos_token_id not in c.ids)
        if not c.truncated:
            assert c.ids.index(tok.eos_token_id) == len(c.ids) - 1  # cut right after the first eos
        assert c.text == tok.decode(c.ids, skip_special_tokens=True)
        assert c.logprobs is not None and len(c.logprobs) == len(c.ids) and all(lp <= 0.0 for lp in c.logprobs)


def test_server_follows_the_trainer_after_a_weight_push(server):
    client, path, _, _ = server
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    prompts, params = _prompts(client.tokenizer), SamplingParams(max_new_tokens=10, temperature=1.0)
    client.load_weights(model)  # the server may hold another test's weights
    assert _max_logprob_gap(model, prompts, client.generate(prompts, params)) < LOGPROB_TOL

    torch.manual_seed(1)
    with torch.no_grad():  # an "update": the trainer's weights move, the server has not seen it yet
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    assert _max_logprob_gap(model, prompts, client.generate(prompts, params)) > 0.1

    client.load_weights(model)
    assert _max_logprob_gap(model, prompts, client.generate(prompts, params)) < LOGPROB_TOL
    assert os.listdir(client.weights_dir) == []  # each pushed file is deleted once loaded


def test_bad_requests_get_a_4xx_with_a_message(server):
    client, _, port, _ = server
    request = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=json.dumps({"prompts": "2+3"}).encode())
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=30)
    assert err.value.code == 400
    assert json.loads(err.value.read())["error"] == "field 'prompts': expected list, found '2+3'"

    with pytest.raises(VLLMServerError, match=r"/generate: HTTP 400: .*vocab"):  # vLLM's own refusal
        client.generate([[10**6]], SamplingParams(max_new_tokens=4))
    with pytest.raises(VLLMServerError, match=r"/load_weights: HTTP 400: cannot read safetensors file"):
        client._request("/load_weights", {"path": str(Path(client.weights_dir) / "missing.safetensors")})
    assert len(client.generate([[1, 2, 3]], SamplingParams(max_new_tokens=4))) == 1  # still serving


def test_an_unreachable_server_is_named():
    port = _free_port()  # nothing listens there
    client = VLLMServerBackend(None, port=port)
    with pytest.raises(VLLMServerError, match=rf"vllm server at 127\.0\.0\.1:{port} unreachable .*waited 0\.5 s"):
        client.wait_until_ready(0.5)


def test_two_training_steps_against_the_server(server, tmp_path):
    _, path, port, _ = server
    cfg = build_config(
        None,
        dict(
            TRAIN,
            output_dir=str(tmp_path / "run"),
            generation_backend="vllm_server",
            vllm_server_port=port,
            vllm_server_timeout=10,
        ),
        environ={},
    )
    policy = load_policy(cfg.model, str(path), torch.device("cpu"), need_reference=False)
    trainer = Trainer(cfg, policy, load_task(cfg))  # pushes the policy's weights at start
    assert isinstance(trainer.backend, VLLMServerBackend)
    two_steps_follow_the_trainer(trainer, policy)


def test_grouprl_train_against_the_server(server, tmp_path):
    """The documented command: ``grouprl train --generation_backend vllm_server`` ends rc 0 and logs the
    importance-sampling ratios of the server's log-probs."""
    _, path, port, _ = server
    flags = [
        a
        for k, v in TRAIN.items()
        if k != "n_eval"
        for a in (f"--{k}", *(map(str, v) if isinstance(v, list) else [str(v)]))
    ]
    out = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grouprl.cli",
            "train",
            "--model_name_or_path",
            str(path),
            *flags,
            "--n_eval",
            "0",
            "--max_steps",
            "2",
            "--output_dir",
            str(out),
            "--generation_backend",
            "vllm_server",
            "--vllm_server_port",
            str(port),
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [m for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "reward" in m]
    assert [m["step"] for m in steps] == [1, 2]
    assert all(0.99 < m["importance_sampling/ratio_mean"] < 1.01 for m in steps), steps


def _weights_version(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as reply:
        return json.loads(reply.read())["weights_version"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_processes_push_the_weights_once_per_update(server, tmp_path, mode):
    """DDP over 2 processes on one server: the server loads the weights once at the start and once per update,
    not once per process, and every step trains (in ``async``, within the staleness bound)."""
    _, path, port, _ = server
    before = _weights_version(port)
    flags = [
        a
        for k, v in TRAIN.items()
        if k != "n_eval"
        for a in (f"--{k}", *(map(str, v) if isinstance(v, list) else [str(v)]))
    ]
    out = tmp_path / "run"
    torchrun(
        [
            "-m",
            "grouprl.cli",
            "train",
            "--model_name_or_path",
            str(path),
            *flags,
            "--n_eval",
            "0",
            "--max_steps",
            "2",
            "--output_dir",
            str(out),
            "--generation_backend",
            "vllm_server",
            "--vllm_server_port",
            str(port),
            "--rollout_mode",
            mode,
            "--max_staleness",
            "1",
        ],
        nproc=2,
        timeout=600,
        cwd=tmp_path,
    )
    assert _weights_version(port) - before == 1 + 2
    steps = [m for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "reward" in m]
    assert [m["step"] for m in steps] == [1, 2]
    if mode == "async":
        assert all(m["async/staleness_max"] <= 1 for m in steps), steps


def test_close_stops_the_server(server):
    client, _, _, proc = server
    client.close_server()
    assert proc.wait(60) == 0
