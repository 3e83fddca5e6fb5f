"""The parts of bench/device/check.py, each a function ``part(spec, report) -> dict`` run in its own process
(or in-process with ``--isolate none``).

``spec`` holds the device, the dtype, ``fast`` (tiny sizes for the CPU test) and ``work`` (a scratch folder
the parts share: the saved models are built once there). ``report(partial)`` keeps what a part has measured
so far, so a part stopped at its time cap still leaves its finished steps.

- ``train_<model>``: the grouprl Trainer (HF generation, grouped scoring, the Learner's update) for N steps
  through ``bench.vs_trl.workers.worker_grouprl``: step time, tokens/s, peak GPU memory;
- ``trl_<model>``: TRL's GRPOTrainer on the same work (``bench.vs_trl.workers.worker_trl``);
- ``scoring``: grouped (block mask, prefix cache) vs padded log-probs and entropies of the same batch;
- ``lm_head``: one update's scoring forward + backward, chunked LM head vs whole logits: peak memory and time;
- ``captured_decode``: the decode loop vs the static-cache loop, eager and as a CUDA graph
  (``bench/device/captured_decode.py``).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from pathlib import Path

from bench.device.async_judge import part_async_judge
from bench.device.models import built_once, random_weights
from bench.vs_trl.compare import QWEN25_05B
from bench.vs_trl.workers import BENCH_SYSTEM_PROMPT, gpu_sync_and_peak_mb, grouprl_cli, worker_grouprl, worker_trl

# The work per training step, both trainers alike. Random weights never choose eos among 151,936 tokens, so the
# Qwen-shaped completions all run to the cap: a step is exactly prompts x K x max_new_tokens generated tokens.
TRAIN_SHAPES = {
    "tiny": dict(config="tiny", prompts=16, k=8, max_new_tokens=8, steps=8, warmup=2),
    "qwen05b": dict(config="gsm8k", prompts=2, k=8, max_new_tokens=128, steps=5, warmup=1),
}
FAST_TRAIN_SHAPES = {
    "tiny": dict(config="tiny", prompts=2, k=4, max_new_tokens=6, steps=3, warmup=1),
    "qwen05b": dict(config="gsm8k", prompts=1, k=4, max_new_tokens=6, steps=3, warmup=1),
}
TINY_DIMS, FAST_TINY_DIMS = dict(hidden=128, layers=4, heads=4), dict(hidden=32, layers=1, heads=4)
# --fast: the Qwen2 architecture at toy width (the code paths, not the numbers)
FAST_QWEN = dict(
    QWEN25_05B,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    vocab_size=32768,
)
# Tolerances of the scoring check (max |grouped - padded| over completion tokens). fp32: the layouts differ only
# in summation order. bf16: each layout rounds its own activations, so the bar is the bf16 rounding itself,
# max |padded bf16 - padded fp32| of the same batch (BF16_FLOOR_FACTOR of it), and never below BF16_MIN_TOL.
FP32_TOL, BF16_FLOOR_FACTOR, BF16_MIN_TOL = 1e-3, 1.5, 0.02


def qwen_dims(spec: dict) -> dict:
    return FAST_QWEN if spec["fast"] else QWEN25_05B


def _task_corpus(spec: dict, shape: dict) -> str:
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task

    a = worker_args(spec, shape, model="")
    task = load_task(build_config(cli=grouprl_cli(a, str(Path(spec["work"]) / "task")), environ={}))
    return task.tokenizer_corpus() + (BENCH_SYSTEM_PROMPT[shape["config"]] or "")


def saved_model(spec: dict, name: str) -> str:
    """The model ``name`` (tiny or qwen05b) saved under spec["work"] in spec["dtype"], built by the first part that
    needs it (random weights, seed 0)."""

    def build(folder: Path) -> None:
        corpus = _task_corpus(spec, (FAST_TRAIN_SHAPES if spec["fast"] else TRAIN_SHAPES)[name])
        if name == "tiny":
            from grouprl.models.tiny import init_tiny

            dims = FAST_TINY_DIMS if spec["fast"] else TINY_DIMS
            init_tiny(corpus, folder, dims["hidden"], dims["layers"], dims["heads"], seed=0)
        else:
            from transformers import Qwen2Config, Qwen2ForCausalLM

            random_weights(spec, folder, corpus, Qwen2Config, Qwen2ForCausalLM, qwen_dims(spec))

    return built_once(spec, name, build)


def worker_args(spec: dict, shape: dict, model: str) -> argparse.Namespace:
    """The namespace bench.vs_trl.workers' workers read (bench/vs_trl/compare.py's options), for this device and dtype."""
    return argparse.Namespace(
        config=shape["config"],
        backend="hf",
        model=model,
        steps=shape["steps"],
        prompts=shape["prompts"],
        k=shape["k"],
        max_new_tokens=shape["max_new_tokens"],
        max_model_len=512,
        threads=spec["threads"],
        lr=1e-6,
        seed=0,
        no_grouped=False,
        no_prefill_once=False,
        grouped_layout="auto",
        vllm_dtype="bfloat16",
        device=spec["device"],
        dtype=spec["dtype"],
        overrides=spec.get("grouprl_set", {}),
    )


def summarize_steps(run: dict, warmup: int) -> dict:
    """Medians and rates over the steps after ``warmup`` (all of them when fewer were taken)."""
    times = run["step_times"][warmup:] or run["step_times"]
    skip = len(run["step_times"]) - len(times)
    tokens, completion = run["tokens"][skip:], run["completion_tokens"][skip:]
    return {
        "steps_timed": len(times),
        "warmup_steps": skip,
        "median_step_s": statistics.median(times),
        "min_step_s": min(times),
        "tokens_per_s": sum(tokens) / sum(times),
        "completion_tokens_per_s": sum(completion) / sum(times),
        "mean_tokens_per_step": statistics.fmean(tokens),
        "mean_completion_tokens_per_step": statistics.fmean(completion),
        "peak_gpu_mb": run.get("peak_gpu_mb"),
        "peak_rss_mb": run.get("peak_rss_mb"),
        "step_times": run["step_times"],
        # grouprl can skip an update whose advantages are all zero; the bench turns that off (TRL never skips): a
        # non-zero count would mean the two sides did not do the same work.
        "updates_skipped": int(sum(run.get("skipped_updates", [])[skip:])),
        # bench.vs_trl.workers.PhaseClock's split. On a GPU only generation is exact (it ends in .tolist(), which waits for
        # the device); the other phases time kernel launches, their GPU work lands in whichever phase waits next.
        "median_phase_s": {
            p: statistics.median(ph.get(p, 0.0) for ph in run["phases"][skip:])
            for p in sorted({p for ph in run["phases"][skip:] for p in ph})
        },
    }


def train_part(trainer: str, name: str):
    def part(spec: dict, report) -> dict:
        shape = (FAST_TRAIN_SHAPES if spec["fast"] else TRAIN_SHAPES)[name]
        model = saved_model(spec, name)
        args = worker_args(spec, shape, model)
        worker = worker_grouprl if trainer == "grouprl" else worker_trl
        settings = {"trainer": trainer, "model": name, **shape}
        start = time.perf_counter()
        run = worker(args, report=lambda partial: report({**settings, **summarize_steps(partial, shape["warmup"])}))
        return {**settings, **summarize_steps(run, shape["warmup"]), "part_s": time.perf_counter() - start}

    return part


def group_batch(
    groups: int,
    k: int,
    prompt_range: tuple[int, int],
    completion_range: tuple[int, int],
    vocab: int,
    eos: int,
    pad: int,
    seed: int = 0,
):
    """``groups`` prompts of uneven lengths, K completions each of uneven lengths (half ending in eos), the
    group members shuffled through the batch, as the learner gets them."""
    from grouprl.policy.scoring import pack

    rng = random.Random(seed)
    prompts, completions = [], []
    for _ in range(groups):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(*prompt_range))]
        for _ in range(k):
            c = [rng.randrange(3, vocab) for _ in range(rng.randint(*completion_range))]
            prompts.append(prompt)
            completions.append(c + [eos] if rng.random() < 0.5 else c)
    order = list(range(len(prompts)))
    rng.shuffle(order)
    return pack([prompts[i] for i in order], [completions[i] for i in order], pad)


def _qwen_model(spec: dict, attn: str | None = None):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(**qwen_dims(spec), pad_token_id=0, eos_token_id=1, bos_token_id=None)
    if attn:
        config._attn_implementation = attn
    with torch.device(spec["device"]):
        return Qwen2ForCausalLM(config)


def part_scoring(spec: dict, report) -> dict:
    """Grouped vs padded scoring on the device: max |difference| of completion log-probs and entropies."""
    import torch

    from grouprl.policy.grouped_scoring import grouped_completion_logps, shared_prefix_logps
    from grouprl.policy.scoring import completion_logps

    fast = spec["fast"]
    vocab = qwen_dims(spec)["vocab_size"]
    batch = group_batch(
        2 if fast else 4,
        4 if fast else 8,
        (5, 20) if fast else (30, 150),
        (2, 12) if fast else (16, 256),
        vocab,
        eos=1,
        pad=0,
    ).to(torch.device(spec["device"]))
    mask = batch.completion_mask.bool()
    rows, out = (
        [],
        {
            "batch": {
                "samples": len(batch),
                "completion_tokens": int(mask.sum()),
                "prompt_width": batch.prompt_ids.size(1),
                "completion_width": batch.completion_ids.size(1),
            },
            "tolerance": {
                "fp32": FP32_TOL,
                "bf16": f"max({BF16_FLOOR_FACTOR} x max|padded bf16 - padded fp32|, {BF16_MIN_TOL})",
            },
        },
    )
    for attn in ("sdpa", "eager"):
        model = _qwen_model(spec, attn).float().eval()
        padded: dict[str, tuple] = {}
        for dtype in ("float32", "bfloat16"):
            model.to(getattr(torch, dtype))
            with torch.no_grad():
                padded[dtype] = completion_logps(model, batch, 0.7, with_entropy=True)
                ref, ref_entropy = padded[dtype]
                floor = float((ref - padded["float32"][0])[mask].abs().max())
                tol = FP32_TOL if dtype == "float32" else max(BF16_FLOOR_FACTOR * floor, BF16_MIN_TOL)
                for layout, scorer in (("block_mask", grouped_completion_logps), ("prefix_cache", shared_prefix_logps)):
                    logps, entropy = scorer(model, batch, 0.7, with_entropy=True)
                    diff = float((logps - ref)[mask].abs().max())
                    rows.append(
                        {
                            "attention": attn,
                            "dtype": dtype,
                            "layout": layout,
                            "max_abs_diff_logp": diff,
                            "mean_abs_diff_logp": float((logps - ref)[mask].abs().mean()),
                            "max_abs_diff_entropy": float((entropy - ref_entropy)[mask].abs().max()),
                            "padded_logp_std": float(ref[mask].float().std()),
                            "bf16_floor_vs_fp32": floor if dtype == "bfloat16" else None,
                            "tolerance": tol,
                            "within_tolerance": diff <= tol,
                            "padding_zero": float(logps[~mask].abs().max()) == 0.0,
                        }
                    )
            report({**out, "rows": rows})
        del model
        gc.collect()
    return {**out, "rows": rows, "all_within_tolerance": all(r["within_tolerance"] and r["padding_zero"] for r in rows)}


def part_lm_head(spec: dict, report) -> dict:
    """One update's scoring forward + backward (policy/scoring.completion_logps with entropy, a mean-logp loss)
    with the chunked LM head (the default) and with whole logits: the peak memory above what was allocated before
    the update (the model, its gradients), and the time."""
    import resource

    import torch

    import grouprl.policy.scoring as scoring
    from grouprl.policy.lm_head import LM_HEAD_CHUNK
    from grouprl.policy.scoring import completion_logps, pack

    fast, cuda = spec["fast"], spec["device"].startswith("cuda")
    completions, length = (2, 300) if fast else (8, 1024)
    model = _qwen_model(spec).to(getattr(torch, spec["dtype"])).train()
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)

    def update(n: int, t: int) -> float:
        b = pack([list(range(3, 33))] * n, torch.randint(3, vocab, (n, t), generator=gen).tolist(), 0)
        b = b.to(torch.device(spec["device"]))
        logps, _ = completion_logps(model, b, 1.0, with_entropy=True)
        loss = -(logps * b.completion_mask).sum() / b.completion_mask.sum()
        loss.backward()
        return float(loss)

    update(1, 8)  # gradients allocated, kernels warm
    chunked_head = scoring.supports_chunked_head
    variants = {}
    try:
        for variant in ("chunked", "whole"):
            scoring.supports_chunked_head = chunked_head if variant == "chunked" else (lambda m: False)
            gen.manual_seed(1)  # the same batch for both
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            before = (
                torch.cuda.memory_allocated() / 2**20
                if cuda
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
            )
            start = time.perf_counter()
            loss = update(completions, length)
            gpu_sync_and_peak_mb(spec["device"])
            seconds = time.perf_counter() - start
            peak = (
                torch.cuda.max_memory_allocated() / 2**20
                if cuda
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
            )
            variants[variant] = {
                "update_peak_mb": peak - before,
                "allocated_before_mb": before,
                "peak_mb": peak,
                "seconds": seconds,
                "loss": loss,
            }
            report({"variants": variants})
    finally:
        scoring.supports_chunked_head = chunked_head
    element = torch.finfo(getattr(torch, spec["dtype"])).bits // 8
    return {
        "completions": completions,
        "length": length,
        "vocab": vocab,
        "chunk_rows": LM_HEAD_CHUNK,
        "layers": model.config.num_hidden_layers,
        "dtype": spec["dtype"],
        "memory": "torch.cuda.max_memory_allocated" if cuda else "process peak RSS (CPU: not per variant)",
        "whole_logits_mb": completions * (length + 1) * vocab * element / 2**20,
        "variants": variants,
        "memory_ratio_chunked_over_whole": variants["chunked"]["update_peak_mb"]
        / max(variants["whole"]["update_peak_mb"], 1e-9),
        "loss_abs_diff": abs(variants["chunked"]["loss"] - variants["whole"]["loss"]),
    }


def part_captured_decode(spec: dict, report) -> dict:
    """The decode loop vs the static-cache loop, eager and captured, on the training parts' models and work."""
    from bench.device.captured_decode import measure

    shapes = FAST_TRAIN_SHAPES if spec["fast"] else TRAIN_SHAPES
    return measure(spec, report, {name: saved_model(spec, name) for name in shapes}, shapes)


PARTS = {
    "train_tiny": train_part("grouprl", "tiny"),
    "captured_decode": part_captured_decode,  # bench/device/captured_decode.py
    "scoring": part_scoring,
    "lm_head": part_lm_head,
    "train_qwen05b": train_part("grouprl", "qwen05b"),
    "trl_tiny": train_part("trl", "tiny"),
    "trl_qwen05b": train_part("trl", "qwen05b"),
    "async_judge": part_async_judge,  # bench/device/async_judge.py
}
