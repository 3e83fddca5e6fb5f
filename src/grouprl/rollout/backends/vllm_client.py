"""``generation_backend: vllm_server``: generation from a ``grouprl vllm-serve`` process over HTTP.

The trainer's process needs no vLLM: it sends token-id prompts and sampling parameters, and gets back
token ids with their sampling log-probs (so the truncated importance-sampling correction applies as
with the colocated backend). After each update it writes its weights (checkpoint names) as a
safetensors file into a directory the server also sees, posts the file's path, and deletes the file
once the server has loaded it; why a file and not NCCL: ``vllm_server.py``.

Several training processes (DDP) share one server, and only the first pushes: the processes hold the
same weights after each update, so one load per update is enough, and N processes each writing and
loading the same weights would cost N times the sync. Every process then waits at a barrier until
that push has landed, so none samples from the server before the new weights are in (the async
producer of a process holds its generator's lock meanwhile: ``rollout/weight_sync.py``). The server
counts its loads (``weights_version``); the pushing process checks that each push added exactly one.

A LoRA policy pushes its adapter alone where ``vllm_weight_sync`` allows and the server serves LoRA
(``--max_lora_rank``): the base weights once at start (``/load_weights``), then at every push a peft
adapter directory in the same shared directory (``/load_adapter``; ``vllm_lora.py``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import weakref

from grouprl.bounded_http import RequestFailed, request_sync
from grouprl.rollout.backends.vllm import checkpoint_weights, to_completion
from grouprl.rollout.backends.vllm_lora import (
    AdapterFiles,
    adapter_config,
    adapter_tensors,
    choose_adapter_rank,
    refuse_or_fall_back,
)
from grouprl.rollout.sampling import Completion, SamplingParams, stop_token_ids
from grouprl.safe_text import JsonRejected, encodable, safe_json_loads

# Bounds on every request (bounded_http): a server that stalls or trickles cannot hold the trainer past the
# deadline, nor a runaway body fill its memory. A generation batch of a real model takes seconds to minutes.
DEADLINE_S = 3600.0
MAX_BYTES = 1 << 20  # plus 64 bytes per token a /generate may return (its ids and log-probs as JSON)


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


def _distributed() -> bool:
    import torch.distributed as dist  # (train/parallel.py is a floor above: the same check, inline)

    return dist.is_available() and dist.is_initialized()


def _first_process() -> bool:
    import torch.distributed as dist

    return not _distributed() or dist.get_rank() == 0


def _barrier() -> None:
    import torch.distributed as dist

    if _distributed():
        dist.barrier()


def _fresh_weights_dir() -> str:
    """A new directory in shared memory (/dev/shm, where there is one: no disk write), else in the temp dir."""
    return tempfile.mkdtemp(prefix="grouprl-weights-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)


class VLLMServerBackend:
    """GenerationBackend over ``grouprl vllm-serve`` at ``host:port``; ``tokenizer`` decodes the texts as the
    hf backend does. ``weights_dir`` must be visible to the server (default: a fresh one under /dev/shm)."""

    def __init__(
        self,
        tokenizer,
        host: str = "127.0.0.1",
        port: int = 8000,
        weights_dir: str | None = None,
        stops: list[int] | None = None,
        pushes: bool = True,
    ):
        self.tokenizer = tokenizer
        self.pushes = pushes  # False on every process but the first of a DDP run: it alone pushes the weights
        self.weights_version: int | None = None  # the server's load count after this process's last push
        self.stops = stops or ([tokenizer.eos_token_id] if tokenizer is not None else [])  # sampling.stop_token_ids
        self.deadline_s = DEADLINE_S  # every request's total deadline (/health's own is shorter)
        self.port = port
        self.adapter_files: AdapterFiles | None = None  # adapter pushes (``use_adapter_sync``); None: merged
        self.address = f"{host}:{port}"
        self.url = f"http://{self.address}"
        if weights_dir:
            os.makedirs(weights_dir, exist_ok=True)
            self.weights_dir = weights_dir
        else:
            self.weights_dir = _fresh_weights_dir()
            weakref.finalize(self, shutil.rmtree, self.weights_dir, ignore_errors=True)

    def _request(
        self, route: str, payload: dict | None = None, timeout: float | None = None, max_bytes: int = MAX_BYTES
    ) -> dict:
        url = self.url + route
        try:
            answer = request_sync(
                "GET" if payload is None else "POST",
                url,
                json=payload,
                deadline_s=timeout or self.deadline_s,
                max_bytes=max_bytes,
            )
        except RequestFailed as err:
            if err.transient and err.kind != "Deadline":
                raise VLLMServerError(
                    f"vllm server at {self.address} unreachable ({err}); start it with "
                    f"`grouprl vllm-serve --model PATH --port {self.port}`"
                ) from None
            raise VLLMServerError(f"vllm server {url}: {err}") from None
        decoded = safe_json_loads(answer.body)
        if answer.status != 200:
            message = decoded.get("error") if isinstance(decoded, dict) else None
            text = str(message) if message is not None else answer.body.decode("utf-8", "replace").strip()
            raise VLLMServerError(f"vllm server {url}: HTTP {answer.status}: {encodable(text)[:500]}")
        if isinstance(decoded, JsonRejected) or not isinstance(decoded, dict):
            raise VLLMServerError(
                f"vllm server {url}: the answer is not a JSON object "
                f"({getattr(decoded, 'reason', type(decoded).__name__)})"
            )
        return decoded

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
        payload = {
            "prompts": prompt_ids,
            "eos_token_id": self.stops,
            "max_new_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k,
            "greedy": params.greedy,
            **({} if params.seeds is None else {"seeds": params.seeds}),  # one per prompt (keyed draws)
        }
        tokens = len(prompt_ids) * params.max_new_tokens
        answer = self._request("/generate", payload, max_bytes=MAX_BYTES + 64 * tokens)
        return [to_completion(c["ids"], c["logprobs"], self.tokenizer, self.stops) for c in answer["completions"]]

    def load_weights(self, model) -> None:
        """Push ``model``'s weights, or its adapter alone (the pushing process), then wait until every process
        is past the push."""
        if self.pushes and self.adapter_files is not None:
            self.adapter_files.push(adapter_tensors(model), lambda path: self._push("/load_adapter", path))
        elif self.pushes:
            path = write_weights(checkpoint_weights(model), self.weights_dir)
            try:
                self._push("/load_weights", path)
            finally:
                os.unlink(path)
        _barrier()  # no process samples from the server before the push has landed (a no-op in one process)

    def _push(self, route: str, path: str) -> None:
        """Have the server load ``path`` through ``route``; checks that the push was its only load."""
        before = self._request("/health", timeout=60.0).get("weights_version")
        version = self._request(route, {"path": path}).get("weights_version")
        if isinstance(before, int) and version != before + 1:  # another pusher on this server
            raise VLLMServerError(
                f"vllm server at {self.address}: weights_version went {before} -> {version} "
                "over one push: another trainer pushes to this server"
            )
        self.weights_version = version

    def use_adapter_sync(self, model) -> None:
        """From now on a push sends ``model``'s LoRA adapter alone; its base weights go now, once."""
        if self.pushes:
            path = write_weights(checkpoint_weights(model, merge_lora=False), self.weights_dir)
            try:
                self._push("/load_weights", path)
            finally:
                os.unlink(path)
        self.adapter_files = AdapterFiles(adapter_config(model), self.weights_dir)

    def lora_support(self) -> tuple[int, bool]:
        """The largest LoRA rank the server serves (0: none, or a server that does not say) and whether its
        engine runs on a GPU."""
        health = self._request("/health", timeout=60.0)
        rank = health.get("max_lora_rank")
        return (rank if isinstance(rank, int) else 0), health.get("device") == "cuda"

    def close(self) -> None:
        """The run is done with the server (``release_backend``): remove the last adapter directory pushed."""
        if self.adapter_files is not None:
            self.adapter_files.close()

    def close_server(self) -> None:
        """Ask the server to stop (it answers first)."""
        self._request("/close", {})


def build_vllm_server_backend(policy, cfg) -> VLLMServerBackend:
    """The ``vllm_server`` entry of the backend registry: wait for the server, then push the in-memory weights
    (a warm start or a resumed run may differ from the checkpoint the server loaded)."""
    speed = cfg.speed
    backend = VLLMServerBackend(
        policy.tokenizer,
        speed.vllm_server_host,
        speed.vllm_server_port,
        speed.vllm_server_weights_dir or None,
        stop_token_ids(policy.tokenizer, policy.model),
        pushes=_first_process(),
    )
    backend.wait_until_ready(speed.vllm_server_timeout)
    rank, on_gpu = backend.lora_support()
    if choose_adapter_rank(speed.vllm_weight_sync, policy.model, on_gpu, engine_limit=rank):
        backend.use_adapter_sync(policy.model)
    try:
        backend.load_weights(policy.model)
    except VLLMServerError as err:
        if backend.adapter_files is None:
            raise
        refuse_or_fall_back(speed.vllm_weight_sync, str(err))  # vLLM refused the adapter (e.g. lm_head)
        backend.adapter_files = None
        backend.load_weights(policy.model)
    return backend
