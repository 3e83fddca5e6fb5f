"""A LoRA run's weight push to vLLM: the adapter alone vs the merged weights (``vllm_weight_sync: adapter``
vs ``merged``; ``src/grouprl/rollout/backends/vllm_lora.py``), colocated or to ``grouprl vllm-serve``.

One worker process per mode (its own peak RSS, a fresh engine), modes alternating over ``--rounds`` so that
background load hits both alike. A worker loads the model in fp32 with a peft LoRA (grouprl's defaults:
r 16, alpha 32, q/k/v/o; ``--targets all`` adds the MLP's gate/up/down), builds the engine (``merged``: no
LoRA, as a merged run has; ``adapter``: LoRA up to rank 16), pushes once (the start's sync), then
``--pushes`` times after moving the adapter (an "update"), and measures per push:

- ``push_s``: the trainer's ``load_weights`` (merged: merge + vLLM's in-place reload, through a safetensors
  file in /dev/shm for the server; adapter: an adapter directory written to /dev/shm + vLLM's ``add_lora``);
- ``push_peak_mb_<trainer|server|shm>``: the peak during the push above the value just before, of the RSS of
  the trainer's process, of the server's process, and of what /dev/shm holds (sampled every 2 ms);
- ``first_generate_s`` / ``next_generate_s``: the call right after the push and the one after it (greedy, 8
  prompts x ``--new-tokens``): what serving the adapter costs the engine's generation (vLLM's LoRA kernels);
- ``pushed_mb``: the tensors handed over per push.

The adapter worker's last generation is compared with merged weights pushed into the same engine (the
greedy tokens and the largest log-prob difference). The load averages (``uptime``) before and after each
worker are in the results: the machine is shared with other work, so timings carry that noise.

Run with the vLLM venv's python (``.venv-vllm``), one torch thread:

    OMP_NUM_THREADS=1 .venv-vllm/bin/python -m bench.levers.lora_sync --model smollm2 --rounds 2
    OMP_NUM_THREADS=1 .venv-vllm/bin/python -m bench.levers.lora_sync --model smollm2 --backend server
    OMP_NUM_THREADS=1 .venv-vllm/bin/python -m bench.levers.lora_sync --targets all --new-tokens 128 --rounds 1

Writes ``bench/levers/results/lora_sync_<model>[_server].json`` (``--out`` for another name).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import ROOT, child_pythonpath

HERE = Path(__file__).resolve().parent
MODELS = {"smollm2": "smollm2-135m-instruct", "qwen05": "qwen2.5-coder-0.5b-instruct"}
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
TARGETS = {"attn": ATTENTION, "all": ATTENTION + ["gate_proj", "up_proj", "down_proj"]}
QUESTIONS = [f"What is {a} + {b}? Answer with the number." for a, b in ((3, 4), (12, 30), (7, 9), (45, 55))]
QUESTIONS += ["Name a colour.", "Write one word.", "Count to five.", "Say hello."]


def _rss_mb(pid: str) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _shm_mb() -> float:
    """What /dev/shm holds (a pushed file sits there: memory, not in any process's RSS)."""
    stat = os.statvfs("/dev/shm")
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize / 2**20


class PeakRSS:
    """The RSS peaks of processes (``self``, the server) and of /dev/shm over a block, sampled on a thread every
    2 ms (torch and vLLM release the GIL)."""

    def __init__(self, pids: dict[str, str]):
        self.pids = dict(pids, shm="")

    def _now(self) -> dict[str, float]:
        return {name: _shm_mb() if name == "shm" else _rss_mb(pid) for name, pid in self.pids.items()}

    def __enter__(self):
        self.before = self._now()
        self.peak = dict(self.before)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = {name: max(self.peak[name], now) for name, now in self._now().items()}

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = {name: max(self.peak[name], now) for name, now in self._now().items()}

    def above(self) -> dict[str, float]:
        return {f"push_peak_mb_{name}": self.peak[name] - self.before[name] for name in self.pids}


def _policy(path: str, targets: list[str]):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM")
    return get_peft_model(model, lora).eval()


def _move_adapter(model, seed: int) -> None:
    """An "update": the adapter's weights move (B away from zero, so the adapter changes the outputs)."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.copy_(0.02 * torch.randn_like(parameter))


def _generate(backend, prompts, new_tokens: int):
    from grouprl.rollout.sampling import SamplingParams

    start = time.perf_counter()
    out = backend.generate(prompts, SamplingParams(max_new_tokens=new_tokens, greedy=True))
    return out, time.perf_counter() - start


def _push(engine, model, seed: int, new_tokens: int, prompts) -> dict:
    from grouprl.rollout.backends.vllm import checkpoint_weights
    from grouprl.rollout.backends.vllm_lora import adapter_tensors

    _move_adapter(model, seed)
    pushed = adapter_tensors(model) if engine.adapter_sync else checkpoint_weights(model)
    with PeakRSS(engine.pids) as rss:
        start = time.perf_counter()
        engine.backend.load_weights(model)
        seconds = time.perf_counter() - start
    out, first = _generate(engine.backend, prompts, new_tokens)
    _, second = _generate(engine.backend, prompts, new_tokens)
    return dict(
        push_s=seconds,
        **rss.above(),
        rss_before_mb=rss.before["trainer"],
        first_generate_s=first,
        next_generate_s=second,
        pushed_mb=sum(t.numel() * t.element_size() for _, t in pushed) / 2**20,
        tokens=sum(len(c.ids) for c in out),
        _out=out,
    )


class Colocated:
    def __init__(self, args, tok, rank: int):
        from grouprl.rollout.backends.vllm import VLLMBackend, VLLMOptions

        options = VLLMOptions(dtype="float32", max_model_len=1024, max_lora_rank=rank)
        self.backend = VLLMBackend(args.model_path, tok, options)
        self.pids = {"trainer": "self"}
        self.adapter_sync = False

    def use_adapter_sync(self, model) -> None:
        self.backend.use_adapter_sync(model)
        self.adapter_sync = True

    def use_merged_sync(self) -> None:
        self.backend.use_merged_sync()
        self.adapter_sync = False

    def close(self) -> None:
        from grouprl.rollout.generation import release_backend

        release_backend(self.backend)


class Server(Colocated):
    """``grouprl vllm-serve`` in a child process (``--max_lora_rank`` for adapter pushes) and its client."""

    def __init__(self, args, tok, rank: int):
        from bench.common.judge_standin import free_port
        from grouprl.rollout.backends.vllm_client import VLLMServerBackend

        port = free_port()
        command = [sys.executable, "-m", "grouprl.cli", "vllm-serve", "--model", args.model_path, "--port", str(port)]
        command += ["--dtype", "float32", "--max_model_len", "1024", "--max_lora_rank", str(rank)]
        env = dict(os.environ, PYTHONPATH=child_pythonpath(), OMP_NUM_THREADS=str(args.threads))
        self.proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.backend = VLLMServerBackend(tok, port=port)
        self.backend.wait_until_ready(600)
        self.pids = {"trainer": "self", "server": str(self.proc.pid)}
        self.adapter_sync = False

    def use_merged_sync(self) -> None:
        self.backend.adapter_files.close()
        self.backend.adapter_files = None
        self.adapter_sync = False

    def close(self) -> None:
        self.backend.close()
        self.backend.close_server()
        self.proc.wait(60)


def worker(args) -> dict:
    """One mode's measurements, in this process."""
    import torch

    from grouprl.models.loading import load_tokenizer

    torch.set_num_threads(args.threads)
    tok = load_tokenizer(args.model_path)
    model = _policy(args.model_path, TARGETS[args.targets])
    texts = [
        tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        for q in QUESTIONS
    ]
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    start = time.perf_counter()
    rank = 16 if args.worker == "adapter" else 0
    engine = (Server if args.backend == "server" else Colocated)(args, tok, rank)
    engine_s = time.perf_counter() - start
    try:
        if rank:
            engine.use_adapter_sync(model)
        pushes = [_push(engine, model, seed, args.new_tokens, prompts) for seed in range(args.pushes + 1)]
        result = dict(mode=args.worker, engine_start_s=engine_s, start_push=_public(pushes[0]))
        result["pushes"] = [_public(p) for p in pushes[1:]]
        if rank:  # the same weights merged into the same engine: the same tokens?
            engine.use_merged_sync()
            engine.backend.load_weights(model)
            merged, _ = _generate(engine.backend, prompts, args.new_tokens)
            adapter = pushes[-1]["_out"]
            result["same_tokens_as_merged"] = [c.ids for c in adapter] == [c.ids for c in merged]
            result["max_logprob_diff_vs_merged"] = max(
                abs(a - b) for x, y in zip(adapter, merged) for a, b in zip(x.logprobs or [], y.logprobs or [])
            )
    finally:
        engine.close()
    result["ru_maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def _public(push: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in push.items() if not k.startswith("_")}


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _run_worker(mode: str, args) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    command = [sys.executable, "-m", "bench.levers.lora_sync", "--worker", mode, "--result-file", out]
    command += ["--model", args.model, "--targets", args.targets, "--pushes", str(args.pushes)]
    command += ["--new-tokens", str(args.new_tokens), "--threads", str(args.threads), "--backend", args.backend]
    env = dict(os.environ, PYTHONPATH=child_pythonpath(), OMP_NUM_THREADS=str(args.threads))
    before = _uptime()
    subprocess.run(command, check=True, cwd=ROOT, env=env)
    result = json.loads(Path(out).read_text())
    os.unlink(out)
    return dict(result, uptime_before=before, uptime_after=_uptime())


def _summary(runs: list[dict]) -> dict:
    summary = {}
    for mode in ("merged", "adapter"):
        pushes = [p for r in runs if r["mode"] == mode for p in r["pushes"]]
        summary[mode] = {
            key: round(statistics.median(p[key] for p in pushes), 4)
            for key in pushes[0]
            if key.startswith(("push_", "first_", "next_", "pushed_"))
        }
        summary[mode]["push_s_max"] = round(max(p["push_s"] for p in pushes), 4)
        summary[mode]["push_peak_mb_trainer_max"] = round(max(p["push_peak_mb_trainer"] for p in pushes), 1)
        summary[mode]["ru_maxrss_mb_max"] = round(max(r["ru_maxrss_mb"] for r in runs if r["mode"] == mode), 1)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    parser.add_argument("--targets", choices=sorted(TARGETS), default="attn")
    parser.add_argument("--backend", choices=["colocated", "server"], default="colocated")
    parser.add_argument("--rounds", type=int, default=2, help="merged then adapter, this many times")
    parser.add_argument("--pushes", type=int, default=4, help="timed pushes per worker (after the start's)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="results file (default: results/lora_sync_<model>.json)")
    parser.add_argument("--worker", choices=["merged", "adapter"], help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    from grouprl.models.pretrained import cache_dir, is_materialized

    args.model_path = str(cache_dir() / MODELS[args.model])
    if not is_materialized(args.model_path):
        sys.exit(f"{args.model_path} is not there: grouprl init-model --from {MODELS[args.model]}")
    if args.worker:
        Path(args.result_file).write_text(json.dumps(worker(args)))
        return
    runs = [_run_worker(mode, args) for _ in range(args.rounds) for mode in ("merged", "adapter")]
    result = dict(
        command=" ".join(["python -m bench.levers.lora_sync", *sys.argv[1:]]),
        model=MODELS[args.model],
        backend=args.backend,
        lora=dict(r=16, alpha=32, targets=TARGETS[args.targets]),
        dtype="float32",
        threads=args.threads,
        note="CPU, vLLM 0.32 CPU build, colocated; the machine was shared with other work (see uptime_*)",
        summary=_summary(runs),
        runs=runs,
    )
    suffix = "" if args.backend == "colocated" else "_server"
    out = Path(args.out) if args.out else HERE / "results" / f"lora_sync_{args.model}{suffix}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    print("wrote", out)


if __name__ == "__main__":
    main()
