"""Training-forward levers measured one at a time: grouped scoring (block mask ``grouped``, KV-cache
``prefixcache``), bf16, torch.compile, packing.

One timed unit is what the update does per micro-batch: completion log-probs (with entropy)
-> loss -> backward. Each variant runs in its own subprocess (own peak RSS), variants
alternate over ``--rounds`` so background load hits all alike.

    python -m bench.levers.scoring --config tiny --variants padded grouped --rounds 3
    python -m bench.levers.scoring --config gsm8k --groups 1 --reps 1 --rounds 2

Configs (random weights; the architecture comes from a config, nothing is downloaded):
- tiny:  the grouprl tiny Qwen2 (hidden 128, 4 layers), 16 prompts of ~24 tokens x K=8, 8 new tokens;
- gsm8k: Qwen2.5-0.5B's architecture (hidden 896, 24 layers, 14/2 heads, vocab 151936), prompts
         130-170 tokens, K=8 completions of 96-256 tokens (cap 256), ``--groups`` prompts;
- smollm2: SmolLM2-135M's dimensions (the main job): 2 prompts of 38-48 tokens x K=8, replies of 1-12 tokens.
Each run records ``estimate_block_over_cache``: what ``grouped_layout: auto`` estimates for the batch.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIGS = {
    "tiny": dict(hidden=128, inter=384, layers=4, heads=4, kv=2, vocab=64, prompt=(20, 28), comp=(3, 8), groups=16),
    "gsm8k": dict(
        hidden=896, inter=4864, layers=24, heads=14, kv=2, vocab=151936, prompt=(130, 170), comp=(96, 256), groups=1
    ),
    # the main job's shape: SmolLM2-135M's dimensions, 2 prompts (chat template + question) x K=8, replies of 1-12
    "smollm2": dict(
        hidden=576, inter=1536, layers=30, heads=9, kv=3, vocab=49152, prompt=(38, 48), comp=(1, 12), groups=2
    ),
}
VARIANTS = ("padded", "grouped", "prefixcache", "padded_bf16", "grouped_bf16", "padded_compile", "packed")


def build(cfg: dict, seed: int, groups: int, k: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from grouprl.policy.scoring import pack

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=cfg["vocab"],
        hidden_size=cfg["hidden"],
        intermediate_size=cfg["inter"],
        num_hidden_layers=cfg["layers"],
        num_attention_heads=cfg["heads"],
        num_key_value_heads=cfg["kv"],
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        rope_theta=1e6,
        pad_token_id=0,
        eos_token_id=1,
    )
    config._attn_implementation = "sdpa"
    model = Qwen2ForCausalLM(config)
    rng = random.Random(seed)
    prompts, comps = [], []
    for _ in range(groups):
        prompt = [rng.randrange(2, cfg["vocab"]) for _ in range(rng.randint(*cfg["prompt"]))]
        for _ in range(k):
            prompts.append(prompt)
            comps.append([rng.randrange(2, cfg["vocab"]) for _ in range(rng.randint(*cfg["comp"]))])
    return model, pack(prompts, comps, 0)


def packed_completion_logps(model, batch, temperature=1.0, with_entropy=False):
    """Padding-free packing: every (prompt, completion) sample back to back in one row, block-diagonal causal
    mask, positions restarting per sample. Same tokens as padded minus the padding."""
    import torch

    from grouprl.policy.logprobs import entropy_from_logits, selective_log_softmax

    ids, pos, seg, pred, tgt, where = [], [], [], [], [], []
    pl = batch.prompt_mask.sum(-1).tolist()
    cl = batch.completion_mask.sum(-1).tolist()
    P = batch.prompt_ids.size(1)
    for i in range(len(batch)):
        p = batch.prompt_ids[i, P - pl[i] :].tolist()
        c = batch.completion_ids[i, : cl[i]].tolist()
        start = len(ids)
        ids += p + c
        pos += list(range(len(p) + len(c)))
        seg += [i] * (len(p) + len(c))
        pred += [start + len(p) - 1 + t for t in range(len(c))]
        tgt += c
        where += [(i, t) for t in range(len(c))]
    seg_t = torch.tensor(seg)
    L = len(ids)
    mask = (torch.ones(L, L, dtype=torch.bool).tril() & (seg_t[:, None] == seg_t[None, :]))[None, None]
    hidden = model.get_decoder()(
        input_ids=torch.tensor([ids]), attention_mask=mask, position_ids=torch.tensor([pos]), use_cache=False
    ).last_hidden_state[0]
    logits = model.get_output_embeddings()(hidden[torch.tensor(pred)]) / temperature
    w = tuple(torch.tensor(where).T)
    out = torch.zeros(batch.completion_ids.shape).index_put(w, selective_log_softmax(logits, torch.tensor(tgt)))
    ent = torch.zeros(batch.completion_ids.shape).index_put(w, entropy_from_logits(logits.detach()))
    return out, ent if with_entropy else None


def worker(args) -> dict:
    import torch

    from grouprl.algos.loss import policy_loss
    from grouprl.policy.grouped_scoring import grouped_completion_logps, shared_prefix_logps
    from grouprl.policy.scoring import completion_logps

    torch.set_num_threads(args.threads)
    cfg = CONFIGS[args.config]
    if args.comp_min:  # e.g. every completion at the cap, as in vs_trl's random-weight gsm8k runs
        cfg = dict(cfg, comp=(args.comp_min, max(args.comp_min, cfg["comp"][1])))
    model, batch = build(cfg, args.seed, args.groups or cfg["groups"], args.k)
    v = args.variant
    scorer = {
        "grouped": grouped_completion_logps,
        "prefixcache": shared_prefix_logps,
        "packed": packed_completion_logps,
    }.get(v.split("_")[0], completion_logps)
    with torch.no_grad():  # fp32 reference log-probs for the error of a bf16 / compiled variant
        ref, _ = completion_logps(model, batch) if v != "padded" else (None, None)
    if v.endswith("bf16"):
        model = model.to(torch.bfloat16)
    if v.endswith("compile"):
        model.forward = torch.compile(model.forward, dynamic=False)
    model.train()
    adv = torch.linspace(-1, 1, len(batch))
    mask = batch.completion_mask.bool()
    times, fwd_times, cpu_times, err = [], [], [], None
    for rep in range(args.warmup + args.reps):
        model.zero_grad(set_to_none=True)
        t0, c0 = time.perf_counter(), time.process_time()
        logps, entropy = scorer(model, batch, 1.0, with_entropy=True)
        t1 = time.perf_counter()
        loss, _ = policy_loss(logps, logps.detach(), adv, batch.completion_mask, loss_type="dapo")
        loss.backward()
        t2, c2 = time.perf_counter(), time.process_time()
        if rep >= args.warmup:
            times.append(t2 - t0)
            cpu_times.append(c2 - c0)
            fwd_times.append(t1 - t0)
        if ref is not None and err is None:
            err = float((logps.detach().float() - ref)[mask].abs().max())
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    from grouprl.policy.grouped_scoring import layout_costs

    block, cache = layout_costs(model, batch)  # what grouped_layout: auto would estimate for this batch
    return {
        "variant": v,
        "step_s": times,
        "estimate_block_over_cache": block / cache if cache else None,
        "forward_s": fwd_times,
        "cpu_s": cpu_times,
        "peak_rss_mb": ru,
        "max_abs_logp_err": err,
        "completion_tokens": int(batch.completion_mask.sum()),
        "padded_tokens": int(batch.prompt_ids.numel() + batch.completion_ids.numel()),
        "real_tokens": int(batch.prompt_mask.sum() + batch.completion_mask.sum()),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", choices=list(CONFIGS), default="tiny")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=["padded", "grouped"])
    p.add_argument("--variant", default=None, help="(internal) run one worker")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--groups", type=int, default=0, help="prompts per batch (0: the config's)")
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--comp-min", type=int, default=0, help="shortest completion (0: the config's)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.variant:
        print(json.dumps(worker(args)))
        return
    runs: dict[str, list[dict]] = {v: [] for v in args.variants}
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    for r in range(args.rounds):
        order = args.variants if r % 2 == 0 else list(reversed(args.variants))
        for v in order:
            cmd = [sys.executable, __file__, "--variant", v] + [
                a for a in (argv or sys.argv[1:]) if a != "--variants" and a not in VARIANTS
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode:
                sys.stderr.write(proc.stderr[-4000:])
                raise SystemExit(f"{v} failed")
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            runs[v].append(res)
            print(
                f"round {r} {v:15s} fwd+bwd median {statistics.median(res['step_s']):.3f}s "
                f"cpu {statistics.median(res['cpu_s']):.3f}s "
                f"(fwd {statistics.median(res['forward_s']):.3f}s) peak RSS {res['peak_rss_mb']:.0f} MiB "
                f"err {res['max_abs_logp_err']}",
                flush=True,
            )
    base = statistics.median([t for r in runs[args.variants[0]] for t in r["step_s"]])
    base_cpu = statistics.median([t for r in runs[args.variants[0]] for t in r["cpu_s"]])
    summary = {}
    for v, rs in runs.items():
        med = statistics.median([t for r in rs for t in r["step_s"]])
        cpu = statistics.median([t for r in rs for t in r["cpu_s"]])
        summary[v] = {
            "median_fwd_bwd_s": med,
            "speedup_vs_first": base / med,
            "median_cpu_s": cpu,
            "cpu_speedup_vs_first": base_cpu / cpu,
            "median_forward_s": statistics.median([t for r in rs for t in r["forward_s"]]),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
            "max_abs_logp_err": rs[0]["max_abs_logp_err"],
            "real_tokens": rs[0]["real_tokens"],
            "padded_tokens": rs[0]["padded_tokens"],
        }
        print(
            f"{v:15s} wall {med:.3f}s x{base / med:.2f}  cpu {cpu:.3f}s x{base_cpu / cpu:.2f} vs {args.variants[0]}  "
            f"peak {summary[v]['peak_rss_mb']:.0f} MiB  logp err {summary[v]['max_abs_logp_err']}"
        )
    out = Path(args.out or HERE / "results" / f"scoring_{args.config}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"settings": vars(args), "loadavg": os.getloadavg(), "summary": summary, "runs": runs}, indent=2)
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
