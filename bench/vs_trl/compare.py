"""grouprl vs TRL's GRPOTrainer on the same GRPO work: step time, tokens/s, peak memory, phases.

Both trainers get the same model, the same arithmetic questions (``generate_rows``), K
completions per question, the same questions per step, completion cap, temperature, "dapo"
loss, reward (``arithmetic_digits``), learning rate and torch threads. Two configs:

- ``tiny``:  the grouprl tiny Qwen2 (hidden 128, 4 layers), 16 prompts x K=8, 8 new tokens;
- ``gsm8k``: GSM8K-shaped: Qwen2.5-0.5B's architecture from a config (random weights, vocab
  151936), a system prompt that makes prompts ~150 tokens, K=8 completions of up to 256 tokens
  (random weights: all run to the cap); ``--prompts`` per step (1 by default, to fit a CPU);
- ``smollm2``: the real SmolLM2-135M-Instruct (``init-model --from smollm2-135m-instruct``: 49k-token BPE,
  ChatML template), 2 prompts x K=8 completions of up to 96 tokens asked to show brief working (a real
  model ends its turns itself, so lengths vary: compare tokens/s beside step time).

and two generation backends on both sides: ``hf`` (HF generate) and ``vllm`` (grouprl's
``generation_backend: vllm``; TRL's ``use_vllm=True, vllm_mode="colocate"``, both with token-level
truncated importance sampling, cap 2). vLLM workers run in ``--vllm-python`` (the venv from
``.ci/vllm-venv``). Each run is its own subprocess (own imports, allocator and peak RSS); the
runs alternate (grouprl, TRL, then TRL, grouprl, ...) over ``--rounds`` so that background load
on a shared machine hits both alike.

    python -m bench.vs_trl.compare --configs tiny --backends hf vllm --steps 12 --rounds 2

A step is timed from its start to the end of its optimizer step on both sides (grouprl:
``Trainer.train_step()``; TRL: ``training_step`` to ``on_step_end``); its phases come from
``bench.vs_trl.workers.PhaseClock``. Peak memory is the worker's ``ru_maxrss``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, child_pythonpath
from bench.vs_trl import tools as vs_trl_tools  # the tool config: conversations with tool calls
from bench.vs_trl.workers import BENCH_SYSTEM_PROMPT, grouprl_cli, worker_grouprl, worker_trl

HERE = Path(__file__).resolve().parent

SHAPES = {  # prompts per step, K, new tokens, vLLM max_model_len
    "tiny": dict(prompts=16, k=8, max_new_tokens=8, max_model_len=256),
    "gsm8k": dict(prompts=1, k=8, max_new_tokens=256, max_model_len=512),
    "smollm2": dict(prompts=2, k=8, max_new_tokens=96, max_model_len=512),
    "tool": vs_trl_tools.TOOL_SHAPE,  # tool_arithmetic conversations (bench/vs_trl/tools.py)
}
QWEN25_05B = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=32768,
    rope_theta=1e6,
    tie_word_embeddings=True,
    rms_norm_eps=1e-6,
)
PHASES = ["generation", "weight_push", "forward_no_grad", "forward", "backward", "optimizer", "other"]


def build_model(config: str, args, path: Path) -> str:
    from grouprl.run_config import build_config
    from grouprl.models.tiny import build_tokenizer, init_tiny
    from grouprl.tasks import load_task

    if config == "smollm2":  # the real model, tokenizer and chat template (docs/real_models.md)
        from grouprl.models.pretrained import materialize_pretrained

        return str(materialize_pretrained("smollm2-135m-instruct"))
    if config == "tool":
        return vs_trl_tools.build_tool_model(args, path)
    a = argparse.Namespace(**{**vars(args), "config": config, "backend": "hf", **SHAPES[config]})
    task = load_task(build_config(cli=grouprl_cli(a, str(path)), environ={}))
    corpus = task.tokenizer_corpus() + (BENCH_SYSTEM_PROMPT[config] or "")
    if config == "tiny":
        return str(init_tiny(corpus, path, args.hidden, args.layers, args.heads, seed=args.seed))
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_tokenizer(corpus)
    torch.manual_seed(args.seed)
    model = Qwen2ForCausalLM(
        Qwen2Config(**QWEN25_05B, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    )
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = tok.eos_token_id, tok.pad_token_id
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def summarize(runs: list[dict], warmup: int) -> dict:
    times = [t for r in runs for t in r["step_times"][warmup:]]
    tokens = [n for r in runs for n in r["tokens"][warmup:]]
    phases = {p: statistics.median([ph.get(p, 0.0) for r in runs for ph in r["phases"][warmup:]]) for p in PHASES}
    out = {
        "median_step_s": statistics.median(times),
        "min_step_s": min(times),
        "median_cpu_s_per_step": statistics.median([t for r in runs for t in r["cpu_times"][warmup:]]),
        "tokens_per_s": sum(tokens) / sum(times),
        "mean_tokens_per_step": statistics.fmean(tokens),
        "mean_completion_tokens_per_step": statistics.fmean([n for r in runs for n in r["completion_tokens"][warmup:]]),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "setup_rss_mb": max(r["setup_rss_mb"] for r in runs),
        "per_round_median_step_s": [statistics.median(r["step_times"][warmup:]) for r in runs],
        "median_phase_s": phases,
        "engine_dtype": sorted({str(r.get("engine_dtype")) for r in runs}),
        **vs_trl_tools.work_per_step(runs, warmup),
    }
    stats = [s for r in runs for s in r.get("update_stats", [])[warmup:] if s]
    if stats:
        out["importance_sampling"] = {k: statistics.fmean(s[k] for s in stats) for k in stats[0]}
    return out


def print_table(results: dict, args) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for key, pair in results.items():
        if "trl" not in pair or "grouprl" not in pair:
            continue
        g, t = pair["grouprl"], pair["trl"]
        table = Table(
            title=f"{key}: {args.steps} steps x {args.rounds} rounds (first {args.warmup} skipped), "
            f"{args.threads} threads"
        )
        for col in ("metric", "grouprl", "TRL", "grouprl / TRL"):
            table.add_column(col, justify="left" if col == "metric" else "right")
        for label, k, fmt in [
            ("median step (s)", "median_step_s", "{:.3f}"),
            ("min step (s)", "min_step_s", "{:.3f}"),
            ("median CPU s / step", "median_cpu_s_per_step", "{:.2f}"),
            ("tokens/s", "tokens_per_s", "{:.0f}"),
            ("tokens / step", "mean_tokens_per_step", "{:.0f}"),
            ("peak RSS (MiB)", "peak_rss_mb", "{:.0f}"),
        ]:
            table.add_row(label, fmt.format(g[k]), fmt.format(t[k]), f"{g[k] / t[k]:.2f}")
        for p in PHASES:
            gp, tp = g["median_phase_s"][p], t["median_phase_s"][p]
            table.add_row(f"  {p} (s, median)", f"{gp:.3f}", f"{tp:.3f}", f"{gp / tp:.2f}" if tp > 1e-4 else "")
        table.add_row(
            "step throughput ratio (TRL step / grouprl step)", "", "", f"{t['median_step_s'] / g['median_step_s']:.2f}x"
        )
        console.print(table)


def run_worker(which: str, config: str, backend: str, args, model: str, result_file: Path) -> dict:
    python = args.vllm_python if backend == "vllm" else sys.executable
    shape = SHAPES[config]
    cmd = (
        [
            python,
            "-m",
            "bench.vs_trl.compare",
            "--which",
            which,
            "--config",
            config,
            "--backend",
            backend,
            "--model",
            model,
            "--result-file",
            str(result_file),
            "--steps",
            str(args.steps),
            "--threads",
            str(args.threads),
            "--lr",
            str(args.lr),
            "--seed",
            str(args.seed),
            "--prompts",
            str(args.prompts or shape["prompts"]),
        ]
        + (["--no-grouped"] if args.no_grouped else [])
        + (["--no-prefill-once"] if args.no_prefill_once else [])
        + ["--grouped-layout", args.grouped_layout]
        + ["--vllm-dtype", args.vllm_dtype, "--sft-steps", str(args.sft_steps)]
    )
    env = dict(
        os.environ,
        OMP_NUM_THREADS=str(args.threads),
        MKL_NUM_THREADS=str(args.threads),
        TOKENIZERS_PARALLELISM="false",
        TRL_EXPERIMENTAL_SILENCE="1",
        PYTHONPATH=child_pythonpath(keep_caller=False),
    )
    if backend == "vllm":  # the same engine settings for both sides: in-process, 1 GiB KV cache, no pinning
        env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind")
    env = {k: v for k, v in env.items() if not k.startswith("GROUPRL_")}
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": (proc.stdout[-2000:] + proc.stderr[-6000:]).strip()}
    result = json.loads(result_file.read_text())
    result["process_wall_s"] = time.perf_counter() - start
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--which", choices=["both", "grouprl", "trl"], default="both", help="(internal) one worker")
    p.add_argument("--configs", nargs="+", choices=list(SHAPES), default=["tiny"])
    p.add_argument("--config", choices=list(SHAPES), default="tiny", help="(internal)")
    p.add_argument("--backends", nargs="+", choices=["hf", "vllm"], default=["hf"])
    p.add_argument("--backend", choices=["hf", "vllm"], default="hf", help="(internal)")
    p.add_argument("--steps", type=int, default=12, help="training steps per run")
    p.add_argument("--rounds", type=int, default=2, help="alternating runs of each trainer")
    p.add_argument("--warmup", type=int, default=2, help="steps skipped at the start of each run")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompts", type=int, default=0, help="prompts per step (0: the config's)")
    p.add_argument("--lr", type=float, default=1e-6, help="small, so the sampled lengths stay alike across runs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=128, help="tiny model")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--no-grouped", action="store_true", help="grouprl: padded scoring (grouped_scoring off)")
    p.add_argument(
        "--grouped-layout",
        choices=["auto", "prefix_cache", "block_mask"],
        default="auto",
        help="grouprl: speed.grouped_layout",
    )
    p.add_argument(
        "--vllm-dtype",
        default="bfloat16",
        help="grouprl's engine dtype; TRL's engine takes vLLM's 'auto', which is bfloat16 for an fp32 "
        "checkpoint on this CPU (both are recorded as engine_dtype)",
    )
    p.add_argument("--no-prefill-once", action="store_true", help="grouprl, hf backend: prefill every prompt copy")
    p.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    p.add_argument("--sft-steps", type=int, default=300, help="tool config: tool SFT steps of the tiny model")
    p.add_argument("--model", default=None)
    p.add_argument("--result-file", default=None)
    p.add_argument(
        "--out", default=None, help="the results file (default: bench/vs_trl/results/<configs>.json, e.g. tiny.json)"
    )
    args = p.parse_args(argv)
    if args.which == "both" and args.steps <= args.warmup:  # (a worker does not skip: it gets no --warmup)
        p.error("--steps must exceed --warmup")
    if args.which != "both":
        shape = SHAPES[args.config]
        args.k, args.max_new_tokens, args.max_model_len = shape["k"], shape["max_new_tokens"], shape["max_model_len"]
        workers = (
            (vs_trl_tools.worker_grouprl_tools, vs_trl_tools.worker_trl_tools)
            if args.config == "tool"
            else (worker_grouprl, worker_trl)
        )
        result = workers[args.which != "grouprl"](args)
        Path(args.result_file).write_text(json.dumps(result))
        return
    if "vllm" in args.backends and not Path(args.vllm_python).exists():
        print(f"no vLLM interpreter at {args.vllm_python} (make it with: bash .ci/vllm-venv); vllm runs skipped")
        args.backends = [b for b in args.backends if b != "vllm"]

    tmp = Path(tempfile.mkdtemp(prefix="bench_vs_trl_"))
    results: dict[str, dict] = {}
    runs: dict[str, dict[str, list[dict]]] = {}
    try:
        for config in args.configs:
            model = args.model or build_model(config, args, tmp / f"model_{config}")
            for r in range(args.rounds):
                for backend in args.backends:
                    key = f"{config}/{backend}"
                    runs.setdefault(key, {"grouprl": [], "trl": []})
                    for which in ["grouprl", "trl"] if r % 2 == 0 else ["trl", "grouprl"]:
                        res = run_worker(which, config, backend, args, model, tmp / f"{which}_{r}.json")
                        if "error" in res:
                            print(f"{key} {which} round {r} FAILED:\n{res['error'][-3000:]}", flush=True)
                            runs[key].setdefault(f"{which}_errors", []).append(res["error"])
                            continue
                        runs[key][which].append(res)
                        print(
                            f"round {r} {key:12s} {which:8s} median step "
                            f"{statistics.median(res['step_times'][args.warmup :]):.3f}s  peak RSS "
                            f"{res['peak_rss_mb']:.0f} MiB  process {res['process_wall_s']:.1f}s",
                            flush=True,
                        )
            for key in [k for k in runs if k.startswith(config + "/")]:
                results[key] = {
                    w: summarize(rs, args.warmup) for w, rs in runs[key].items() if w in ("grouprl", "trl") and rs
                }
                if len(results[key]) == 2:
                    g, t = results[key]["grouprl"], results[key]["trl"]
                    results[key]["throughput_ratio_grouprl_over_trl"] = t["median_step_s"] / g["median_step_s"]
                    results[key]["peak_rss_ratio_grouprl_over_trl"] = g["peak_rss_mb"] / t["peak_rss_mb"]
        print_table(results, args)
        for key, res in results.items():
            if "throughput_ratio_grouprl_over_trl" in res:
                print(
                    f"{key}: throughput grouprl/TRL = {res['throughput_ratio_grouprl_over_trl']:.2f}x, "
                    f"peak RSS grouprl/TRL = {res['peak_rss_ratio_grouprl_over_trl']:.2f}"
                )
        import torch
        import transformers
        import trl

        record = {
            "settings": {k: v for k, v in vars(args).items() if k not in ("which", "result_file")},
            "shapes": SHAPES,
            "environment": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "transformers (hf runs)": transformers.__version__,
                "trl": trl.__version__,
                "cpu_count": os.cpu_count(),
                "platform": platform.platform(),
                "loadavg_at_end": os.getloadavg(),
            },
            "results": results,
            "runs": runs,
        }
        out = Path(args.out or HERE / "results" / f"{'_'.join(args.configs)}.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=2))
        print(f"wrote {out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
