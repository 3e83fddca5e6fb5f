"""grouprl vs TRL's GRPOTrainer on the same GRPO work: step time, tokens/s, peak memory.

Both trainers get the same tiny Qwen2 model (built once with ``init_tiny`` from the
arithmetic corpus), the same arithmetic questions (``generate_rows``), K completions per
question, the same number of questions per step, the same completion cap, temperature,
"dapo" loss, reward (``arithmetic_digits``), learning rate, and the same number of torch
threads. Each run is its own subprocess (``--which grouprl`` / ``--which trl``), so imports,
allocator state and peak RSS are per trainer; runs alternate over ``--rounds`` so that
background load on the machine hits both alike.

    python bench/vs_trl.py --steps 20 --rounds 2

Per step, both workers time the whole step (generation + reward + advantages + loss +
backward + optimizer): grouprl around ``Trainer.train_step()``, TRL from
``on_step_begin`` to ``on_step_end`` of a ``TrainerCallback`` (also reported: the interval
between consecutive ``on_step_end``, which adds TRL's logging and data fetching). Also per
step: process CPU time, and generation time (grouprl: its ``generation_time`` metric, rollout
+ rewards; TRL: its ``_generate``). Tokens are prompt + completion tokens (non-padding) of the
step's batch. Peak memory is the worker's ``ru_maxrss``.

On a shared machine, oversubscribed cores make torch's worker threads wait for each other and
steps several times slower; the minimum step time is then the least disturbed figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
N_TRAIN = 4000  # distinct questions (16 per step; more than any run consumes)


def rss_mb() -> float:
    """Current resident set size (MiB), from /proc (Linux); ru_maxrss elsewhere."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mb()


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def grouprl_cli(args, out_dir: str) -> dict:
    return {
        "output_dir": out_dir, "task": "arithmetic", "n_train": N_TRAIN, "n_eval": 1,
        "num_generations": args.k, "batch_size": args.prompts, "max_new_tokens": args.max_new_tokens,
        "temperature": 1.0, "top_p": 1.0, "top_k": 0, "generation_batch_size": args.k * args.prompts,
        "loss_type": "dapo", "beta": 0.0, "advantage": "grpo", "scale_rewards": "group",
        "learning_rate": args.lr, "weight_decay": 0.0, "adam_beta2": 0.999, "max_grad_norm": 1.0,
        "gradient_accumulation_steps": 1, "max_steps": args.steps, "lr_scheduler_type": "constant",
        "torch_dtype": "float32", "device": "cpu", "num_threads": args.threads, "seed": args.seed,
        "rewards": ["arithmetic_digits"], "log_rollouts": False,
    }


# --- workers ---------------------------------------------------------------------------------
def worker_grouprl(args) -> dict:
    import torch

    from grouprl.config import build_config
    from grouprl.policy.loading import load_policy
    from grouprl.tasks import load_task
    from grouprl.train.trainer import Trainer

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = tempfile.mkdtemp(prefix="bench_grouprl_")
    try:
        cfg = build_config(cli=grouprl_cli(args, out), environ={})
        task = load_task(cfg)
        policy = load_policy(cfg.model, args.model, torch.device("cpu"), need_reference=False)
        trainer = Trainer(cfg, policy, task)
        setup_rss = rss_mb()
        step_times, cpu_times, tokens, completion_tokens, gen_times = [], [], [], [], []
        for _ in range(args.steps):
            start, cpu = time.perf_counter(), time.process_time()
            record = trainer.train_step()
            metrics, episodes = trainer.metrics(record), record.episodes
            step_times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu)
            trainer.step += 1
            n_prompt = sum(len(s.prompt_ids) for ep in episodes for s in ep.steps)
            n_comp = sum(len(s.action_ids) for ep in episodes for s in ep.steps)
            tokens.append(n_prompt + n_comp)
            completion_tokens.append(n_comp)
            gen_times.append(metrics["generation_time"] + metrics["score_time"])  # rollout incl. rewards
        return {"step_times": step_times, "step_intervals": step_times, "cpu_times": cpu_times, "tokens": tokens,
                "completion_tokens": completion_tokens, "generation_times": gen_times, "setup_rss_mb": setup_rss,
                "peak_rss_mb": peak_rss_mb(), "last_reward": metrics["reward"]}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def worker_trl(args) -> dict:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grouprl.config import build_config
    from grouprl.policy.loading import load_tokenizer
    from grouprl.rewards.arithmetic import arithmetic_digits
    from grouprl.tasks import load_task

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = tempfile.mkdtemp(prefix="bench_trl_")
    try:
        task = load_task(build_config(cli=grouprl_cli(args, out), environ={}))  # the very same rows
        dataset = Dataset.from_list([{"prompt": task.messages(r), "ground_truth": r["ground_truth"]}
                                     for r in task.train_rows])

        def arithmetic_digits_reward(completions, ground_truth, **_):
            return [arithmetic_digits(c[-1]["content"] if isinstance(c, list) else c, gt)
                    for c, gt in zip(completions, ground_truth)]

        class Timer(TrainerCallback):
            def __init__(self):
                self.begin: list[float] = []
                self.end: list[float] = []
                self.cpu: list[float] = []

            def on_step_begin(self, a, state, control, **kw):
                self.begin.append(time.perf_counter())
                self._cpu = time.process_time()

            def on_step_end(self, a, state, control, **kw):
                self.end.append(time.perf_counter())
                self.cpu.append(time.process_time() - self._cpu)

        class Counting(GRPOTrainer):
            """Counts the non-padding prompt + completion tokens of each generation batch; times generation."""

            def _generate(self, prompts):
                start = time.perf_counter()
                out = super()._generate(prompts)
                self.bench_generation_times.append(time.perf_counter() - start)
                return out

            def _generate_and_score_completions(self, inputs):
                batch = super()._generate_and_score_completions(inputs)
                self.bench_tokens.append(int(batch["prompt_mask"].sum() + batch["completion_mask"].sum()))
                self.bench_completion_tokens.append(int(batch["completion_mask"].sum()))
                return batch

        n = args.k * args.prompts
        config = GRPOConfig(
            output_dir=out, loss_type="dapo", beta=0.0, num_generations=args.k,
            per_device_train_batch_size=n, gradient_accumulation_steps=1, max_completion_length=args.max_new_tokens,
            temperature=1.0, top_p=1.0, top_k=0, learning_rate=args.lr, weight_decay=0.0, lr_scheduler_type="constant",
            max_grad_norm=1.0, max_steps=args.steps, scale_rewards="group", use_cpu=True, bf16=False,
            gradient_checkpointing=False, use_vllm=False, report_to="none", logging_steps=1, save_strategy="no",
            disable_tqdm=True, seed=args.seed, dataloader_num_workers=0, log_completions=False,
        )
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
        # The same tokenizer object grouprl uses: for the tiny model's character tokenizer, transformers 5's
        # AutoTokenizer picks Qwen2Tokenizer (from the model type), which drops spaces and newlines.
        tokenizer = load_tokenizer(args.model)
        timer = Timer()
        trainer = Counting(model=model, reward_funcs=arithmetic_digits_reward, args=config, train_dataset=dataset,
                           processing_class=tokenizer, callbacks=[timer])
        trainer.remove_callback(PrinterCallback)
        trainer.bench_tokens, trainer.bench_completion_tokens, trainer.bench_generation_times = [], [], []
        setup_rss = rss_mb()
        start = time.perf_counter()
        trainer.train()
        step_times = [e - b for b, e in zip(timer.begin, timer.end)]
        ends = [start] + timer.end
        intervals = [ends[i + 1] - ends[i] for i in range(len(timer.end))]
        return {"step_times": step_times, "step_intervals": intervals, "cpu_times": timer.cpu,
                "tokens": trainer.bench_tokens, "completion_tokens": trainer.bench_completion_tokens,
                "generation_times": trainer.bench_generation_times, "setup_rss_mb": setup_rss,
                "peak_rss_mb": peak_rss_mb(),
                "last_reward": next((h["reward"] for h in reversed(trainer.state.log_history) if "reward" in h), None)}
    finally:
        shutil.rmtree(out, ignore_errors=True)


# --- orchestration ---------------------------------------------------------------------------
def build_model(args, path: Path) -> str:
    from grouprl.config import build_config
    from grouprl.policy.tiny import init_tiny
    from grouprl.tasks import load_task

    task = load_task(build_config(cli=grouprl_cli(args, str(path)), environ={}))
    return str(init_tiny(task.tokenizer_corpus(), path, args.hidden, args.layers, args.heads, seed=args.seed))


def summarize(runs: list[dict], warmup: int) -> dict:
    times = [t for r in runs for t in r["step_times"][warmup:]]
    intervals = [t for r in runs for t in r["step_intervals"][warmup:]]
    tokens = [n for r in runs for n in r["tokens"][warmup:]]
    comp = [n for r in runs for n in r["completion_tokens"][warmup:]]
    cpu = [t for r in runs for t in r["cpu_times"][warmup:]]
    gen = [t for r in runs for t in r["generation_times"][warmup:]]
    return {
        "median_step_s": statistics.median(times),
        "mean_step_s": statistics.fmean(times),
        "min_step_s": min(times),
        "median_cpu_s_per_step": statistics.median(cpu),
        "median_generation_s": statistics.median(gen),
        "median_rest_of_step_s": statistics.median([s - g for r in runs for s, g in
                                                    zip(r["step_times"][warmup:], r["generation_times"][warmup:])]),
        "median_step_interval_s": statistics.median(intervals),
        "tokens_per_s": sum(tokens) / sum(times),
        "mean_tokens_per_step": statistics.fmean(tokens),
        "mean_completion_tokens_per_step": statistics.fmean(comp),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "setup_rss_mb": max(r["setup_rss_mb"] for r in runs),
        "per_round_median_step_s": [statistics.median(r["step_times"][warmup:]) for r in runs],
    }


def print_table(summary: dict, args) -> None:
    from rich.console import Console
    from rich.table import Table

    g, t = summary["grouprl"], summary["trl"]
    table = Table(title=f"grouprl vs TRL GRPOTrainer: {args.prompts} prompts x K={args.k}, {args.max_new_tokens} new "
                        f"tokens, dapo, {args.threads} threads, {args.steps} steps x {args.rounds} rounds "
                        f"(first {args.warmup} skipped)")
    table.add_column("metric")
    table.add_column("grouprl", justify="right")
    table.add_column("TRL", justify="right")
    table.add_column("grouprl / TRL", justify="right")
    rows = [
        ("median step time (s)", "median_step_s", "{:.3f}"),
        ("min step time (s)", "min_step_s", "{:.3f}"),
        ("median generation (s)", "median_generation_s", "{:.3f}"),
        ("median rest of step (s)", "median_rest_of_step_s", "{:.3f}"),
        ("median step interval (s)", "median_step_interval_s", "{:.3f}"),
        ("median CPU time per step (s)", "median_cpu_s_per_step", "{:.2f}"),
        ("tokens/s (prompt+completion)", "tokens_per_s", "{:.0f}"),
        ("tokens per step", "mean_tokens_per_step", "{:.0f}"),
        ("completion tokens per step", "mean_completion_tokens_per_step", "{:.0f}"),
        ("RSS after setup (MiB)", "setup_rss_mb", "{:.0f}"),
        ("peak RSS (MiB)", "peak_rss_mb", "{:.0f}"),
    ]
    for label, key, fmt in rows:
        table.add_row(label, fmt.format(g[key]), fmt.format(t[key]), f"{g[key] / t[key]:.2f}")
    table.add_row("per-round median step (s)", " ".join(f"{x:.3f}" for x in g["per_round_median_step_s"]),
                  " ".join(f"{x:.3f}" for x in t["per_round_median_step_s"]), "")
    Console().print(table)


def run_worker_subprocess(which: str, args, model: str, result_file: Path) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--which", which, "--model", model,
           "--result-file", str(result_file), "--steps", str(args.steps), "--threads", str(args.threads),
           "--k", str(args.k), "--prompts", str(args.prompts), "--max-new-tokens", str(args.max_new_tokens),
           "--lr", str(args.lr), "--seed", str(args.seed)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               TOKENIZERS_PARALLELISM="false", TRL_EXPERIMENTAL_SILENCE="1")
    env = {k: v for k, v in env.items() if not k.startswith("GROUPRL_")}
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
        raise SystemExit(f"{which} worker failed (exit {proc.returncode})")
    result = json.loads(result_file.read_text())
    result["process_wall_s"] = time.perf_counter() - start
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--which", choices=["both", "grouprl", "trl"], default="both",
                   help="both = orchestrate; grouprl/trl = run one worker (internal)")
    p.add_argument("--steps", type=int, default=20, help="training steps per run")
    p.add_argument("--rounds", type=int, default=2, help="alternating runs of each trainer")
    p.add_argument("--warmup", type=int, default=3, help="steps skipped at the start of each run")
    p.add_argument("--threads", type=int, default=2, help="torch threads in each worker")
    p.add_argument("--k", type=int, default=8, help="completions per prompt")
    p.add_argument("--prompts", type=int, default=16, help="prompts per step")
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-6, help="small, so the sampled lengths stay alike across runs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=128, help="tiny model hidden size (grouprl default)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--model", default=None, help="existing model dir (default: build the tiny model)")
    p.add_argument("--result-file", default=None, help="worker: where to write its JSON result")
    p.add_argument("--out", default=str(HERE / "results" / "vs_trl.json"))
    args = p.parse_args(argv)
    if args.steps <= args.warmup:
        p.error("--steps must exceed --warmup")

    if args.which != "both":
        result = (worker_grouprl if args.which == "grouprl" else worker_trl)(args)
        Path(args.result_file).write_text(json.dumps(result))
        return

    tmp = Path(tempfile.mkdtemp(prefix="bench_vs_trl_"))
    try:
        model = args.model or build_model(args, tmp / "tiny_model")
        runs: dict[str, list[dict]] = {"grouprl": [], "trl": []}
        for r in range(args.rounds):
            order = ["grouprl", "trl"] if r % 2 == 0 else ["trl", "grouprl"]
            for which in order:
                res = run_worker_subprocess(which, args, model, tmp / f"{which}_{r}.json")
                res["round"] = r
                runs[which].append(res)
                med = statistics.median(res["step_times"][args.warmup:])
                print(f"round {r} {which:8s} median step {med:.3f}s  peak RSS {res['peak_rss_mb']:.0f} MiB  "
                      f"process {res['process_wall_s']:.1f}s", flush=True)
        summary = {w: summarize(rs, args.warmup) for w, rs in runs.items()}
        summary["ratio_grouprl_over_trl"] = {
            k: summary["grouprl"][k] / summary["trl"][k]
            for k in ("median_step_s", "min_step_s", "median_step_interval_s", "median_cpu_s_per_step",
                      "median_generation_s", "median_rest_of_step_s", "tokens_per_s", "peak_rss_mb", "setup_rss_mb")
        }
        print_table(summary, args)
        import torch
        import transformers
        import trl

        record = {
            "settings": {k: v for k, v in vars(args).items() if k not in ("which", "result_file")},
            "environment": {"python": platform.python_version(), "torch": torch.__version__,
                            "transformers": transformers.__version__, "trl": trl.__version__,
                            "cpu_count": os.cpu_count(), "platform": platform.platform(),
                            "loadavg_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None},
            "summary": summary,
            "runs": runs,
        }
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=2))
        print(f"wrote {out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
