"""Peak memory and time of one update's scoring forward + backward, whole logits vs the chunked LM head.

SmolLM2-135M-Instruct (49,152-token vocabulary, from ``grouprl init-model --from smollm2-135m-instruct``),
``--completions`` sequences of a ~30-token chat prompt + ``--length`` completion tokens, through
``policy/scoring.completion_logps`` with a GRPO-like loss, forward and backward. Each variant runs in its
own subprocess (own allocator, own ``ru_maxrss``); peak RSS is reported with the RSS before the update (model
and gradients' memory from a warm-up step), so the difference is the update's own memory.

    OMP_NUM_THREADS=1 python -m bench.levers.lm_head_memory --completions 8 --length 512 [--layers 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def worker(variant: str, model_dir: str, completions: int, length: int, layers: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    import grouprl.policy.scoring as scoring
    from grouprl.policy.scoring import completion_logps, pack

    if variant == "whole":
        scoring.supports_chunked_head = lambda model: False  # the path before policy/lm_head.py
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    vocab = model.config.vocab_size
    if layers:  # the first N decoder layers only: the head's share of the memory stands out
        model.model.layers = model.model.layers[:layers]
        model.config.num_hidden_layers = layers

    def batch(n, t):
        return pack([list(range(1, 31))] * n, torch.randint(3, vocab, (n, t)).tolist(), 2)

    def update(b):
        logps, entropy = completion_logps(model, b, 1.0, with_entropy=True)
        (-(logps * b.completion_mask).sum() / b.completion_mask.sum()).backward()

    update(batch(1, 8))  # gradients allocated, kernels warm
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    start = time.perf_counter()
    update(batch(completions, length))
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    logits_mb = completions * (length + 1) * vocab * 4 / 2**20
    return {
        "variant": variant,
        "peak_rss_mb": round(peak),
        "rss_before_mb": round(before),
        "update_mb": round(peak - before),
        "seconds": round(seconds, 2),
        "whole_logits_fp32_mb": round(logits_mb),
        "threads": torch.get_num_threads(),
        "layers": len(model.model.layers),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model dir (default: materialise smollm2-135m-instruct)")
    parser.add_argument("--completions", type=int, default=8, help="sequences in the update (default: 8)")
    parser.add_argument("--length", type=int, default=512, help="completion tokens each (default: 512)")
    parser.add_argument("--layers", type=int, default=0, help="keep the first N decoder layers (default: 0, all 30)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.model, args.completions, args.length, args.layers)))
        return
    if args.model is None:
        from grouprl.models.pretrained import materialize_pretrained

        args.model = str(materialize_pretrained("smollm2-135m-instruct"))
    rows = []
    for variant in ("whole", "chunked"):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--worker",
                variant,
                "--model",
                args.model,
                "--completions",
                str(args.completions),
                "--length",
                str(args.length),
                "--layers",
                str(args.layers),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]))
    whole, chunked = rows
    print(
        f"update memory {whole['update_mb']} -> {chunked['update_mb']} MB "
        f"(peak RSS {whole['peak_rss_mb']} -> {chunked['peak_rss_mb']} MB), "
        f"time {whole['seconds']} -> {chunked['seconds']} s"
    )


if __name__ == "__main__":
    main()
