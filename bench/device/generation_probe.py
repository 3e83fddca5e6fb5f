"""One generation of the GPU check's training shape, timed path by path and attention kernel by kernel.

For a lent GPU session, beside bench/device/check.py: builds the check's model (``tiny`` or ``qwen05b``, random
weights, bf16 on CUDA), takes the prompts of one real Trainer step, then times the same ``generate`` call
through grouprl's decode loop (both draws, oneDNN on and off), its static-cache variant
(``speed.captured_decode``: a CUDA graph per step on CUDA) and HF ``generate`` (``prefill_once`` off), and on CUDA
once more with cuDNN's attention allowed and forbidden in the same process (the ``model.cudnn_attention`` switch,
speed/cuda_attention.py). ``--profile``: cProfile and torch.profiler tables of
the default path. docs/performance.md, "third session", has its figures on an H100.

    python3 -m bench.device.generation_probe --device cuda --models tiny --out $OUT/probe.json
    python -m bench.device.generation_probe --device cpu --fast          # the code paths, toy sizes
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import tempfile
import time
from pathlib import Path

import torch

from bench.device.parts import FAST_TRAIN_SHAPES, TRAIN_SHAPES, saved_model, worker_args
from bench.vs_trl.workers import grouprl_cli


def first_step_prompts(trainer):
    """The (prompt ids, sampling params) of the generate call inside one real training step."""
    seen, real = [], trainer.backend.generate

    def record(ids, params):
        seen.append((ids, params))
        return real(ids, params)

    trainer.backend.generate = record
    trainer.train_step()
    trainer.backend.generate = real
    return seen[0]


def timed(fn, device: str, repeats: int) -> dict:
    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    fn()
    sync()
    times, tokens = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - start)
        tokens = sum(len(c.ids) for c in out)
    return {"median_ms": 1000 * statistics.median(times), "min_ms": 1000 * min(times), "tokens": tokens}


def probe(name: str, args) -> dict:
    from grouprl.models.loading import load_policy
    from grouprl.rollout.generation import HFBackend
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task
    from grouprl.train.trainer import Trainer

    spec = {
        "device": args.device,
        "dtype": "bfloat16" if args.device == "cuda" else "float32",
        "fast": args.fast,
        "work": tempfile.mkdtemp(prefix="gen_probe_"),
        "threads": args.threads,
    }
    shape = (FAST_TRAIN_SHAPES if args.fast else TRAIN_SHAPES)[name]
    model_dir = saved_model(spec, name)
    wargs = worker_args(spec, shape, model_dir)
    cfg = build_config(cli=grouprl_cli(wargs, tempfile.mkdtemp(prefix="gen_probe_run_")), environ={})
    device = torch.device(args.device)
    policy = load_policy(cfg.model, model_dir, device, need_reference=False)
    trainer = Trainer(cfg, policy, load_task(cfg))
    ids, params = first_step_prompts(trainer)
    m, tok = policy.model, policy.tokenizer
    paths = {
        "loop inverse_cdf": HFBackend(m, tok, device, True, onednn=True, draw_with="inverse_cdf"),
        "loop multinomial": HFBackend(m, tok, device, True, onednn=True, draw_with="multinomial"),
        "loop no onednn": HFBackend(m, tok, device, True, onednn=False, draw_with="inverse_cdf"),
        # the static-cache loop (rollout/static_decode.py), its step a CUDA graph on CUDA, eager on a CPU
        "captured decode": HFBackend(m, tok, device, True, onednn=True, draw_with="inverse_cdf", captured=True),
        "hf generate": HFBackend(m, tok, device, False, onednn=False),
    }
    repeats = args.repeats
    result = {
        "rows": len(ids),
        "max_new_tokens": params.max_new_tokens,
        "cudnn_attention_at_load": torch.backends.cuda.cudnn_sdp_enabled(),
        "paths": {},
    }
    for label, backend in paths.items():
        result["paths"][label] = timed(lambda b=backend: b.generate(ids, params), args.device, repeats)
    if args.device == "cuda":  # the switch within one process: the A/B of speed/cuda_attention.py
        for allowed in (True, False):
            torch.backends.cuda.enable_cudnn_sdp(allowed)
            for label in ("loop inverse_cdf", "hf generate"):
                key = f"{label}, cudnn {'allowed' if allowed else 'off'}"
                result["paths"][key] = timed(lambda b=paths[label]: b.generate(ids, params), args.device, repeats)
        torch.backends.cuda.enable_cudnn_sdp(cfg.model.cudnn_attention)
    if args.profile:
        result["profile"] = profile_text(lambda: paths["loop inverse_cdf"].generate(ids, params), args.device)
    return result


def profile_text(fn, device: str) -> str:
    from torch.profiler import ProfilerActivity, profile

    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(10)  # the call path: decode and its callers
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(20)  # where the time itself goes
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as torch_prof:
        fn()
    return text.getvalue() + torch_prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--models", nargs="+", choices=sorted(TRAIN_SHAPES), default=["tiny"])
    p.add_argument("--fast", action="store_true", help="toy sizes (the CPU test)")
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--out", default=None, help="a JSON file for the results")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = {name: probe(name, args) for name in args.models}
    for name, res in results.items():
        print(
            f"{name}: {res['rows']} rows x {res['max_new_tokens']} tokens, cuDNN attention at load "
            f"{res['cudnn_attention_at_load']}"
        )
        for label, t in res["paths"].items():
            print(f"  {label:32s} median {t['median_ms']:9.1f} ms  min {t['min_ms']:9.1f}  tokens {t['tokens']}")
        if "profile" in res:
            print(res["profile"])
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
