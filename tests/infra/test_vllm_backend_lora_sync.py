"""Adapter-only weight sync on vLLM's CPU build (``vllm_weight_sync``, ``rollout/backends/vllm_lora.py``): after an
adapter push, the engine's greedy tokens and log-probs are those after a merged push, and the trainer's, for the
colocated backend (and its async producer's staged push) and for ``grouprl vllm-serve``; every push is served,
not a cached earlier adapter; an adapter vLLM refuses stops an ``adapter`` run in one line and falls back to
merged pushes in ``auto`` (which takes the adapter on a GPU only: here, as if on one).

Skipped where vLLM is not installed; CI runs it in the vllm venv (``.ci/vllm-venv``)."""

from __future__ import annotations

import logging
import os
import socket
import string
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM not installed (pip install grouprl[vllm]; CI: .ci/vllm-venv)")

from grouprl.models.loading import load_tokenizer  # noqa: E402
from vllm_steps import wait_until_served  # noqa: E402
from grouprl.models.tiny import init_tiny  # noqa: E402
from grouprl.policy.scoring import completion_logps, pack  # noqa: E402
from grouprl.config import ConfigError  # noqa: E402
from grouprl.rollout.backends import vllm as vllm_backend  # noqa: E402
from grouprl.rollout.backends.vllm import build_vllm_backend  # noqa: E402
from grouprl.rollout.backends.vllm_client import VLLMServerBackend  # noqa: E402
from grouprl.rollout.generation import SamplingParams, release_backend  # noqa: E402
from grouprl.rollout.weight_sync import GeneratorCopy  # noqa: E402
from grouprl.run_config import build_config  # noqa: E402

LOGPROB_TOL = 1e-3  # as tests/infra/test_vllm_backend.py: fp32 engine vs fp32 trainer, measured max |diff| ~5e-5
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PROMPTS = [[5, 6, 7, 8, 9], [20, 21, 22], [20, 21, 22], [40, 12, 33, 70]]
GREEDY = SamplingParams(max_new_tokens=10, greedy=True)
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return init_tiny(string.printable, tmp_path_factory.mktemp("lora_sync"), hidden=128, layers=2, heads=4, seed=3)


def _lora_policy(path, targets=TARGETS):
    """A peft LoRA policy whose adapter matters: A and B drawn away from peft's init (B = 0 is the identity)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM")
    model = get_peft_model(model, lora).eval()
    _update(model, seed=0)
    return model


def _update(model, seed: int) -> None:
    """An "update": the adapter moves (the base does not: it is frozen)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.copy_(0.3 * torch.randn_like(parameter))


def _trainer_gap(model, completions) -> float:
    """The largest |trainer log-prob - engine log-prob| over the completions' tokens."""
    batch = pack(PROMPTS, [c.ids for c in completions], 0)
    with torch.no_grad():
        ours, _ = completion_logps(model, batch)
    theirs = torch.tensor([c.logprobs + [0.0] * (ours.size(1) - len(c.ids)) for c in completions])
    return float((ours - theirs)[batch.completion_mask.bool()].abs().max())


def _same(adapter, merged) -> None:
    assert [c.ids for c in adapter] == [c.ids for c in merged]
    gap = max(abs(a - m) for x, y in zip(adapter, merged) for a, m in zip(x.logprobs, y.logprobs))
    assert gap < LOGPROB_TOL, gap


def _cfg(**speed):
    flags = dict(vllm_dtype="float32", vllm_max_model_len=128, **speed)
    return build_config(None, flags, environ={})


def test_colocated_adapter_pushes_generate_as_merged_pushes(tiny):
    tok = load_tokenizer(str(tiny))
    model = _lora_policy(tiny)
    backend = build_vllm_backend(SimpleNamespace(model=model, tokenizer=tok), _cfg(vllm_weight_sync="adapter"))
    try:
        assert backend.adapter is not None and backend.llm.llm_engine.list_loras() == {1}
        adapter = backend.generate(PROMPTS, GREEDY)  # the first call after the start's adapter push
        assert _trainer_gap(model, adapter) < LOGPROB_TOL
        served, backend.adapter.request = backend.adapter.request, None
        assert _trainer_gap(model, backend.generate(PROMPTS, GREEDY)) > 0.1  # the base alone: the adapter matters
        backend.adapter.request = served
        backend.use_merged_sync()
        backend.load_weights(model)
        _same(adapter, backend.generate(PROMPTS, GREEDY))

        backend.use_adapter_sync(model)  # base again (the merged push changed it), then adapters alone
        _update(model, seed=1)
        backend.load_weights(model)
        _update(model, seed=2)  # a second push: a new LoRA id, not the cached first adapter
        backend.load_weights(model)
        assert backend.adapter.request.lora_int_id == 2 and backend.llm.llm_engine.list_loras() == {2}
        second = backend.generate(PROMPTS, GREEDY)
        assert _trainer_gap(model, second) < LOGPROB_TOL

        copy = GeneratorCopy(backend, version=0)  # the async producer: staged, installed at its next call
        _update(model, seed=3)
        copy.push(model, 1)
        staged = copy.generate(PROMPTS, GREEDY)
        assert staged[0].policy_version == 1 and _trainer_gap(model, staged) < LOGPROB_TOL
        assert len(os.listdir(backend.adapter_files.parent)) == 1  # only the served adapter's directory
        backend.use_merged_sync()
        backend.load_weights(model)
        _same(staged, backend.generate(PROMPTS, GREEDY))
    finally:
        release_backend(backend)


def _untied(path, out) -> Path:
    """The tiny model with its own lm_head (a merged lm_head is lost on an engine that ties it to the embedding)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())
    model.save_pretrained(out)
    load_tokenizer(str(path)).save_pretrained(out)
    return Path(out)


def test_an_adapter_vllm_refuses_stops_an_adapter_run_in_one_line(tiny):
    model = _lora_policy(tiny, ["q_proj", "lm_head"])  # vLLM adapts no lm_head
    policy = SimpleNamespace(model=model, tokenizer=load_tokenizer(str(tiny)))
    with pytest.raises(ConfigError) as err:
        build_vllm_backend(policy, _cfg(vllm_weight_sync="adapter"))  # the engine is closed before the error
    assert "\n" not in str(err.value) and "lm_head" in str(err.value) and "vllm_weight_sync: merged" in str(err.value)


def test_an_adapter_vllm_refuses_falls_back_to_merged_pushes_in_auto(tiny, tmp_path, caplog, monkeypatch):
    path = _untied(tiny, tmp_path / "untied")
    model = _lora_policy(path, ["q_proj", "lm_head"])  # vLLM adapts no lm_head
    choose = vllm_backend.choose_adapter_rank  # auto takes the adapter on a GPU alone: as if on one
    monkeypatch.setattr(vllm_backend, "choose_adapter_rank", lambda mode, model, on_gpu: choose(mode, model, True))
    with caplog.at_level(logging.INFO, logger="grouprl.rollout.backends.vllm_lora"):
        backend = build_vllm_backend(SimpleNamespace(model=model, tokenizer=load_tokenizer(str(path))), _cfg())
    try:
        assert backend.adapter is None and "lm_head" in caplog.text and "pushing merged weights" in caplog.text
        assert _trainer_gap(model, backend.generate(PROMPTS, GREEDY)) < LOGPROB_TOL
    finally:
        release_backend(backend)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(path, log: Path, port: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "grouprl.cli", "vllm-serve", "--model", str(path), "--port", str(port)]
    command += ["--dtype", "float32", "--max_model_len", "128", "--max_lora_rank", "8"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])))
    with open(log, "w") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=dict(env, OMP_NUM_THREADS="1"))


def test_server_adapter_pushes_generate_as_merged_pushes(tiny, tmp_path):
    from grouprl.rollout.backends.vllm_client import build_vllm_server_backend

    port, log = _free_port(), tmp_path / "server.log"
    proc = _serve(tiny, log, port)
    try:
        probe = VLLMServerBackend(None, port=port)
        wait_until_served(proc, probe, log)
        tok = load_tokenizer(str(tiny))
        model = _lora_policy(tiny)
        assert probe.lora_support() == (8, False)  # a CPU server: auto pushes merged weights to it
        push_dir = str(tmp_path / "push")
        cfg = _cfg(vllm_server_port=port, vllm_server_weights_dir=push_dir, vllm_weight_sync="adapter")
        client = build_vllm_server_backend(SimpleNamespace(model=model, tokenizer=tok), cfg)
        assert client.adapter_files is not None and client.weights_version == 2  # the base, then the adapter
        adapter = client.generate(PROMPTS, GREEDY)
        assert _trainer_gap(model, adapter) < LOGPROB_TOL
        _update(model, seed=1)
        client.load_weights(model)  # a new adapter, served at once
        second = client.generate(PROMPTS, GREEDY)
        assert _trainer_gap(model, second) < LOGPROB_TOL
        assert len(os.listdir(tmp_path / "push")) == 1  # the served adapter's directory alone
        client.adapter_files.close()
        client.adapter_files = None
        client.load_weights(model)  # merged
        _same(second, client.generate(PROMPTS, GREEDY))
        assert os.listdir(tmp_path / "push") == []
        client.close_server()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
