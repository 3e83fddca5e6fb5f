"""``generation_backend: vllm_server``: generation from a ``grouprl vllm-serve`` process over HTTP.

The trainer's process needs no vLLM: it sends token-id prompts and sampling parameters, and gets back
token ids with their sampling log-probs (so the truncated importance-sampling correction applies as
with the colocated backend). After each update it writes its weights (checkpoint names) as a
safetensors file into a directory the server also sees, posts the file's path, and deletes the file
once the server has loaded it; why a file and not NCCL: ``vllm_server.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
import weakref

from grouprl.rollout.backends.vllm import checkpoint_weights, to_completion
from grouprl.rollout.sampling import Completion, SamplingParams


class VLLMServerError(RuntimeError):
    """The vLLM server could not be reached, or refused or failed a request (its one-line message)."""


def write_weights(weights, directory: str) -> str:
    """Write ``(name, tensor)`` pairs as one safetensors file in ``directory``, atomically (a temporary name,
    then a rename: the server never reads half a file); returns its path."""
    from safetensors.torch import save_file

    tensors, storages = {}, set()
    for name, t in weights:
        t = t.detach().to("cpu").contiguous()
        storage = t.untyped_storage().data_ptr()
        if storage in storages:  # tied weights share storage, which safetensors refuses: a copy of its own
            t = t.clone()
        storages.add(t.untyped_storage().data_ptr())
        tensors[name] = t
    fd, partial = tempfile.mkstemp(prefix="weights-", suffix=".partial", dir=directory)
    os.close(fd)
    try:
        save_file(tensors, partial)
        path = partial.removesuffix(".partial") + ".safetensors"
        os.replace(partial, path)
    except BaseException:
        os.unlink(partial)
        raise
    return path


def _fresh_weights_dir() -> str:
    """A new directory in shared memory (/dev/shm, where there is one: no disk write), else in the temp dir."""
    return tempfile.mkdtemp(prefix="grouprl-weights-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)


class VLLMServerBackend:
    """GenerationBackend over ``grouprl vllm-serve`` at ``host:port``; ``tokenizer`` decodes the texts as the
    hf backend does. ``weights_dir`` must be visible to the server (default: a fresh one under /dev/shm)."""

    def __init__(self, tokenizer, host: str = "127.0.0.1", port: int = 8000, weights_dir: str | None = None):
        self.tokenizer = tokenizer
        self.port = port
        self.address = f"{host}:{port}"
        self.url = f"http://{self.address}"
        if weights_dir:
            os.makedirs(weights_dir, exist_ok=True)
            self.weights_dir = weights_dir
        else:
            self.weights_dir = _fresh_weights_dir()
            weakref.finalize(self, shutil.rmtree, self.weights_dir, ignore_errors=True)

    def _request(self, route: str, payload: dict | None = None, timeout: float | None = None) -> dict:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(self.url + route, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as err:
            raise VLLMServerError(f"vllm server {self.url}{route}: HTTP {err.code}: {_error_message(err)}") from None
        except (urllib.error.URLError, ConnectionError) as err:
            reason = getattr(err, "reason", err)
            raise VLLMServerError(f"vllm server at {self.address} unreachable ({reason}); start it with "
                                  f"`grouprl vllm-serve --model PATH --port {self.port}`") from None

    def wait_until_ready(self, timeout: float) -> None:
        """Poll ``/health`` until it answers or ``timeout`` seconds pass (the server may still be loading)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._request("/health", timeout=max(1.0, min(5.0, timeout)))
                return
            except VLLMServerError as err:
                if time.monotonic() >= deadline:
                    raise VLLMServerError(f"{err} (waited {timeout:g} s for /health; vllm_server_timeout)") from None
            time.sleep(0.25)

    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        payload = {"prompts": prompt_ids, "eos_token_id": self.tokenizer.eos_token_id,
                   "max_new_tokens": params.max_new_tokens, "temperature": params.temperature,
                   "top_p": params.top_p, "top_k": params.top_k, "greedy": params.greedy}
        answer = self._request("/generate", payload)
        return [to_completion(c["ids"], c["logprobs"], self.tokenizer) for c in answer["completions"]]

    def load_weights(self, model) -> None:
        path = write_weights(checkpoint_weights(model), self.weights_dir)
        try:
            self._request("/load_weights", {"path": path})
        finally:
            os.unlink(path)

    def close_server(self) -> None:
        """Ask the server to stop (it answers first)."""
        self._request("/close", {})


def _error_message(err: urllib.error.HTTPError) -> str:
    body = err.read()
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body.decode(errors="replace").strip()[:500] or err.reason


def build_vllm_server_backend(policy, cfg) -> VLLMServerBackend:
    """The ``vllm_server`` entry of the backend registry: wait for the server, then push the in-memory weights
    (a warm start or a resumed run may differ from the checkpoint the server loaded)."""
    speed = cfg.speed
    backend = VLLMServerBackend(policy.tokenizer, speed.vllm_server_host, speed.vllm_server_port,
                                speed.vllm_server_weights_dir or None)
    backend.wait_until_ready(speed.vllm_server_timeout)
    backend.load_weights(policy.model)
    return backend
