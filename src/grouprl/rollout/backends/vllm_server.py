"""``grouprl vllm-serve``: a vLLM engine in its own process, serving the trainer over HTTP (JSON).

Routes (the client is ``rollout/backends/vllm_client.py``, ``generation_backend: vllm_server``):

- ``GET /health``: ``{"status": "ok", "model": ..., "weights_version": n, "max_lora_rank": r, "device": d}``
  once the engine is built; ``weights_version`` counts the weight and adapter loads so far (0: the checkpoint it
  started from), ``max_lora_rank`` the largest LoRA rank it serves (0: started without ``--max_lora_rank``, no
  adapters), ``device`` ``cuda`` or ``cpu`` (where ``vllm_weight_sync: auto`` takes the adapter: a GPU).
- ``POST /generate``: ``{"prompts": [[token ids]...], "eos_token_id", "max_new_tokens", "temperature",
  "top_p", "top_k", "greedy"}`` -> ``{"completions": [{"ids": [...], "logprobs": [...]}...]}``, one per
  prompt, in order, and the ``weights_version`` that sampled them; identical consecutive prompts are one request with ``n`` samples, as in the
  colocated backend (``vllm.sample``). Log-probs are the sampling ones (after temperature).
- ``POST /load_weights``: ``{"path": FILE}``, a safetensors file of the trainer's weights under their
  checkpoint names; loaded through the same in-place ``reload_weights`` route as the colocated backend.
  Answers ``{"loaded": tensors, "weights_version": n}``. Several training processes share one server and
  only the first pushes (``vllm_client.py``): one load per update. The adapter served so far is dropped
  (the weights hold it merged, or the adapter push that follows replaces it).
- ``POST /load_adapter``: ``{"path": DIR}``, a peft adapter directory (``adapter_model.safetensors``,
  ``adapter_config.json``): every later ``/generate`` samples under it (``vllm_weight_sync``: adapter pushes
  of a LoRA policy, ``vllm_lora.py``). A new LoRA id each time; the previous adapter is removed. Answers
  ``{"adapter": name, "weights_version": n}``; 400 when vLLM refuses it (the reason), or without LoRA.
- ``POST /close``: answers, then stops the server; SIGTERM and Ctrl-C stop it too.

Errors answer ``{"error": "one line"}``: 400 for a bad request (wrong fields, a prompt vLLM refuses),
500 for anything else. One engine serves one request at a time (a lock): vLLM batches within a request.

Why weights go through a file and not NCCL: TRL's ``vllm-serve`` pushes each tensor over an NCCL
communicator between the trainer's GPU and the engine's, which needs GPUs on both ends. A
safetensors file works on CPU too (and so can be tested here), at the cost of one write and one
read of the weights per update; in /dev/shm that is a memory copy. The route needs a filesystem
that both processes see: the same node (/dev/shm, the default) or a shared filesystem
(``vllm_server_weights_dir``).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from grouprl.rollout.sampling import SamplingParams


class BadRequest(ValueError):
    """A request the server refuses, with a one-line message for the client."""


def _field(body: dict, name: str, kind: type | tuple[type, ...], default=None):
    value = body.get(name, default)
    if value is None or isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise BadRequest(f"field '{name}': expected {expected}, found {value!r}"[:300])
    return value


def parse_generate(body) -> tuple[list[list[int]], SamplingParams, int | list[int]]:
    """The prompts, sampling parameters and stop ids of a ``/generate`` body; BadRequest names what is wrong."""
    if not isinstance(body, dict):
        raise BadRequest(f"expected a JSON object, found {type(body).__name__}")
    prompts = _field(body, "prompts", list)
    for i, p in enumerate(prompts):
        if not isinstance(p, list) or not p or not all(isinstance(t, int) and not isinstance(t, bool) for t in p):
            raise BadRequest(f"field 'prompts'[{i}]: expected a non-empty list of token ids, found {p!r}"[:300])
    params = SamplingParams(
        max_new_tokens=_field(body, "max_new_tokens", int, 16),
        temperature=float(_field(body, "temperature", (int, float), 1.0)),
        top_p=float(_field(body, "top_p", (int, float), 1.0)),
        top_k=_field(body, "top_k", int, 0),
        greedy=_field(body, "greedy", bool, False),
        seeds=body.get("seeds"),  # absent: the engine's own generator
    )
    seeds = params.seeds
    if seeds is not None and (
        not isinstance(seeds, list)
        or len(seeds) != len(prompts)
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in seeds)
    ):
        raise BadRequest(
            f"field 'seeds': expected one integer per prompt ({len(prompts)}), found {params.seeds!r}"[:300]
        )
    if params.max_new_tokens < 1:
        raise BadRequest(f"field 'max_new_tokens': expected >= 1, found {params.max_new_tokens}")
    eos = _field(body, "eos_token_id", (int, list))  # one id, or every stop id of the model (a turn ends on any)
    if isinstance(eos, list) and (not eos or not all(isinstance(t, int) and not isinstance(t, bool) for t in eos)):
        raise BadRequest(f"field 'eos_token_id': expected a token id or a non-empty list of them, found {eos!r}"[:300])
    return prompts, params, eos


def load_weight_file(path: str) -> list:
    """``(name, tensor)`` pairs of a safetensors file; BadRequest when it cannot be read."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return list(load_file(path).items())
    except (OSError, SafetensorError) as err:
        raise BadRequest(f"cannot read safetensors file {path!r}: {getattr(err, 'strerror', None) or err}") from err


class EngineServer(ThreadingHTTPServer):
    """The HTTP server and the engine it serves; ``engine`` is a ``vllm.LLM``."""

    daemon_threads = True

    def __init__(self, engine, model_path: str, host: str, port: int, max_lora_rank: int = 0):
        import torch

        from grouprl.rollout.backends.vllm_lora import AdapterSlot

        super().__init__((host, port), _Handler)
        self.engine, self.model_path, self.max_lora_rank = engine, model_path, max_lora_rank
        self.adapter = AdapterSlot(engine)  # the adapter /generate samples under (none until /load_adapter)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.request_errors = _request_errors()
        self.lock = threading.Lock()  # vLLM's LLM is not thread-safe: one request at a time
        self.weights_version = 0  # loads so far: a load lands between two generate requests, never inside one

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}"

    def stop_soon(self) -> None:
        """Stop ``serve_forever`` from any thread (``shutdown`` blocks until it returns, so not on its own)."""
        threading.Thread(target=self.shutdown, daemon=True).start()

    def generate(self, body) -> dict:
        from grouprl.rollout.backends.vllm import sample

        prompts, params, eos = parse_generate(body)
        with self.lock:
            samples = sample(self.engine, prompts, params, eos, self.adapter.request)
            version = self.weights_version
        return {
            "completions": [{"ids": ids, "logprobs": logprobs} for ids, logprobs in samples],
            "weights_version": version,
        }

    def load_weights(self, body) -> dict:
        from grouprl.rollout.backends.vllm import reload_weights

        path = _field(body if isinstance(body, dict) else {}, "path", str)
        weights = load_weight_file(path)
        with self.lock:
            reload_weights(self.engine, weights)
            self.adapter.forget()
            self.weights_version += 1
            version = self.weights_version
        return {"loaded": len(weights), "weights_version": version}

    def load_adapter(self, body) -> dict:
        path = _field(body if isinstance(body, dict) else {}, "path", str)
        if not self.max_lora_rank:
            raise BadRequest("this server serves no LoRA adapters: start it with --max_lora_rank R")
        with self.lock:
            self.adapter.load(path)  # AdapterRefused (a ValueError): 400 with vLLM's reason
            self.weights_version += 1
            version = self.weights_version
        return {"adapter": self.adapter.request.lora_name, "weights_version": version}


class _Handler(BaseHTTPRequestHandler):
    server: EngineServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's name
        pass  # one line per request would drown the trainer's log

    def _answer(self, status: HTTPStatus, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path == "/health":
            self._answer(
                HTTPStatus.OK,
                {
                    "status": "ok",
                    "model": self.server.model_path,
                    "weights_version": self.server.weights_version,
                    "max_lora_rank": self.server.max_lora_rank,
                    "device": self.server.device,
                },
            )
        else:
            self._answer(HTTPStatus.NOT_FOUND, {"error": f"no route GET {self.path}; known: GET /health"})

    def do_POST(self) -> None:  # noqa: N802
        routes = {
            "/generate": self.server.generate,
            "/load_weights": self.server.load_weights,
            "/load_adapter": self.server.load_adapter,
            "/close": lambda body: {"closing": True},
        }
        if self.path not in routes:
            self._answer(HTTPStatus.NOT_FOUND, {"error": f"no route POST {self.path}; known: {sorted(routes)}"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            try:
                body = json.loads(raw)
            except ValueError as err:
                raise BadRequest(f"body is not JSON ({err})") from err
            self._answer(HTTPStatus.OK, routes[self.path](body))
        except self.server.request_errors as err:  # BadRequest, vLLM's refusals (token out of vocab, too long)
            self._answer(HTTPStatus.BAD_REQUEST, {"error": _one_line(err)})
        except Exception as err:  # the engine failed: the client shows the message, the server keeps serving
            self._answer(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(err).__name__}: {_one_line(err)}"})
        if self.path == "/close":
            self.server.stop_soon()


def _request_errors() -> tuple[type[Exception], ...]:
    """Errors that the request caused (HTTP 400): ours, and vLLM's client errors (older vLLMs: ValueError)."""
    try:
        from vllm.exceptions import VLLMClientError
    except ImportError:
        return (ValueError,)
    return (ValueError, VLLMClientError)


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())[:500] or type(err).__name__


def serve(args: argparse.Namespace) -> int:
    from grouprl.rollout.backends.vllm import VLLMOptions, make_engine
    from grouprl.rollout.backends.vllm_lora import engine_rank

    max_lora_rank = engine_rank(args.max_lora_rank) if args.max_lora_rank > 0 else 0
    options = VLLMOptions(
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        cpu_kv_cache_gb=args.cpu_kv_cache_gb,
        gpu_memory_utilization=args.gpu_memory_utilization,
        seed=args.seed,
        enforce_eager=args.enforce_eager == "true",
        max_lora_rank=max_lora_rank,
    )
    engine = make_engine(args.model, options)  # no sleep mode: the engine has its process (and device) to itself
    try:
        server = EngineServer(engine, args.model, args.host, args.port, max_lora_rank)
    except OSError as err:
        print(f"grouprl vllm-serve: error: cannot listen on {args.host}:{args.port}: {err.strerror}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: server.stop_soon())
    print(f"grouprl vllm-serve: ready at {server.url} (model {args.model}; SIGTERM or POST /close stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def add_vllm_serve_parser(sub) -> argparse.ArgumentParser:
    sv = sub.add_parser(
        "vllm-serve",
        help="a vLLM engine in its own process for generation_backend: vllm_server",
        description="Serve a vLLM engine over HTTP on HOST:PORT; a trainer with "
        "--generation_backend vllm_server samples from it and pushes its weights "
        "after each update (a safetensors file in a directory both processes see).",
    )
    sv.add_argument("--model", required=True, help="model dir or hub id: the trainer's starting checkpoint (required)")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    sv.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 = any free port)")
    sv.add_argument(
        "--dtype",
        default="auto",
        help="engine dtype; float32 makes its log-probs comparable with an fp32 trainer (default: auto)",
    )
    sv.add_argument("--max_model_len", type=int, default=2048, help="longest prompt + completion (default: 2048)")
    sv.add_argument("--cpu_kv_cache_gb", type=int, default=1, help="CPU: KV-cache size in GiB (default: 1)")
    sv.add_argument(
        "--gpu_memory_utilization",
        type=float,
        default=0.9,
        help="GPU: the engine's share of device memory (default: 0.9)",
    )
    sv.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    sv.add_argument(
        "--max_lora_rank",
        type=int,
        default=0,
        help="serve LoRA adapters up to this rank, so a LoRA trainer pushes its adapter alone "
        "(vllm_weight_sync; rounded up to a rank vLLM accepts; default: 0, none: merged pushes)",
    )
    sv.add_argument(
        "--enforce_eager",
        choices=["true", "false"],
        default="true",
        help="no CUDA graphs / torch.compile: fast start (default: true; false on a GPU for speed)",
    )
    sv.set_defaults(func=serve)
    return sv
