"""The GPU check's ``captured_decode`` part: grouprl's decode loop vs the static-cache loop, eager and captured as a
CUDA graph (``speed.captured_decode``, src/grouprl/rollout/static_decode.py), on the check's two models.

Each model (the tiny Qwen2 and Qwen2.5-0.5B's architecture, random weights, the training parts' files) generates
the training parts' work once per path: prompts x K rows (a shared prefix, then each prompt's own tail of a
different length) up to the parts' ``max_new_tokens``. Random weights seldom pick eos, so every 32nd token id stops a
row too: rows end at different steps, which is where the loops differ (``decode`` drops a finished row from its
batch, the static loop keeps it) and where the inverse-CDF draw's row ranks matter. Per path and sampling (greedy;
temperature 1.0 with the default ``inverse_cdf`` draw): the first call's time (a captured path captures its graph
there), the median of the timed calls, tokens per second, and the share of rows whose tokens equal the loop's from
the same seed (1.0 is the CPU test's claim; on a GPU in bf16 a batch of another shape may round differently).
On a CPU (``--fast``) there is no graph: the part times the loop and the eager static loop at toy sizes.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from functools import partial

STOP_STRIDE = 32  # every STOP_STRIDE-th token id ends a row (random weights: ~3 % a step)
SAMPLINGS = {"greedy": dict(greedy=True), "sampled": dict(temperature=1.0)}


def measure(spec: dict, report, model_dirs: dict[str, str], shapes: dict[str, dict]) -> dict:
    """The part (``bench/device/parts.py`` hands it the model folders and the training shapes)."""
    import torch

    from grouprl.rollout.static_decode import CACHE_BUCKET, SYNC_EVERY

    out: dict = {"sync_every": SYNC_EVERY, "cache_bucket": CACHE_BUCKET, "stop_stride": STOP_STRIDE, "models": {}}
    for name, folder in model_dirs.items():
        out["models"][name] = one_model(spec, folder, shapes[name])
        report(out)
        gc.collect()
        if spec["device"].startswith("cuda"):
            torch.cuda.empty_cache()
    return out


def one_model(spec: dict, folder: str, shape: dict) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from grouprl.models.loading import load_tokenizer
    from grouprl.rollout.decode import decode, sampling_warpers
    from grouprl.rollout.generation import SamplingParams
    from grouprl.rollout.static_decode import can_capture, release, static_decode

    device = torch.device(spec["device"])
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, spec["dtype"])).to(device).eval()
    tok = load_tokenizer(folder)
    vocab = model.config.vocab_size
    prompts = group_prompts(shape["prompts"], shape["k"], vocab)
    stops = sorted({tok.eos_token_id, *range(STOP_STRIDE, vocab, STOP_STRIDE)})
    paths = {"loop": decode, "static": partial(static_decode, capture=False)}
    if can_capture(model, device):
        paths["captured"] = partial(static_decode, capture=True)
    result: dict = {"rows": len(prompts), "max_new_tokens": shape["max_new_tokens"], "paths": {}}
    repeats = 1 if spec["fast"] else 2
    for sampling, kwargs in SAMPLINGS.items():
        params = SamplingParams(max_new_tokens=shape["max_new_tokens"], batch_size=len(prompts), **kwargs)
        warpers = sampling_warpers(model, params)
        reference = None
        for label, loop in paths.items():
            call = partial(run_once, loop, model, prompts, params, warpers, stops, tok.pad_token_id, device)
            timing, rows = timed(call, repeats)
            reference = rows if reference is None else reference
            same = sum(a == b for a, b in zip(rows, reference)) / len(rows)
            lengths = [len(r) for r in rows]
            result["paths"][f"{label} {sampling}"] = {
                **timing,
                "tokens": sum(lengths),
                "tokens_per_s": sum(lengths) / (timing["median_ms"] / 1000),
                "distinct_lengths": len(set(lengths)),
                "rows_equal_to_loop": same,
            }
    release(model)
    return result


def run_once(loop, model, prompts, params, warpers, stops, pad, device) -> list[list[int]]:
    """One generation from seed 0, waited for on the device."""
    import torch

    torch.manual_seed(0)
    with torch.inference_mode():
        rows = loop(model, prompts, params, warpers, stops, pad, device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return rows


def timed(call, repeats: int) -> tuple[dict, list]:
    start = time.perf_counter()
    rows = call()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return {"first_call_ms": 1000 * first, "median_ms": 1000 * statistics.median(times)}, rows


def group_prompts(groups: int, k: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """``groups`` prompts of a shared 24-token prefix and tails of 4 to 40 tokens, each K times in a row."""
    rng = random.Random(seed)
    prefix = [rng.randrange(3, vocab) for _ in range(24)]
    out = []
    for _ in range(groups):
        prompt = prefix + [rng.randrange(3, vocab) for _ in range(rng.randint(4, 40))]
        out += [prompt] * k
    return out


def table(part: dict) -> list[str]:
    """The markdown section of bench/device/report.py."""
    r = part.get("result") or {}
    lines = ["## Decode loop vs static cache vs captured step (speed.captured_decode)", ""]
    if "models" in r:
        lines += [
            f"host reads every {r['sync_every']} steps on CUDA; cache length rounded to {r['cache_bucket']}; "
            f"every {r['stop_stride']}th token id stops a row",
            "",
        ]
    lines += [
        "| model | rows x new tokens | path | first call (ms) | median (ms) | tokens | tokens/s | distinct lengths "
        "| rows equal to the loop's |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for model, m in (r.get("models") or {}).items():
        for label, p in m["paths"].items():
            lines.append(
                f"| {model} | {m['rows']} x {m['max_new_tokens']} | {label} | {p['first_call_ms']:.1f} | "
                f"{p['median_ms']:.1f} | {p['tokens']} | {p['tokens_per_s']:.0f} | {p['distinct_lengths']} | "
                f"{p['rows_equal_to_loop']:.3f} |"
            )
    return lines
