"""The objective menu on the tiny arithmetic job: grpo-clip vs GSPO vs CISPO vs dynamic sampling, same
budget, several seeds, held-out greedy accuracy before, every 50 steps and after (docs/grpo.md).

Per seed: the job's own SFT warm start (stopped at 20 % held-out), then the default schedule (400 steps,
16 prompts x 8 completions) with each batch used for two optimizer passes (``num_iterations 2``: with
one pass every ratio is 1 and ppo_clip, GSPO and CISPO give the same gradient under dapo). A run whose
folder already has a ``summary.json`` is kept, so the command resumes a partial table.

    python experiments/objectives_table.py --seeds 0 1 2 --out runs/objectives
    python experiments/objectives_table.py --seeds 0 1 2 --out runs/objectives --table_only
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

OBJECTIVES = {  # name -> the flags that choose it (everything else is the default job)
    "grpo-clip (`ppo_clip`, `dapo`)": [],
    "GSPO (`gspo`, `loss_type grpo`)": ["--loss", "gspo", "--loss_type", "grpo"],
    "CISPO (`cispo`, `dapo`)": ["--loss", "cispo"],
    "grpo-clip + dynamic sampling (judge, max 3)": ["--dynamic_sampling", "{metric: judge, max_batches: 3}"],
}
SLUG = dict(zip(OBJECTIVES, ["grpo_clip", "gspo", "cispo", "dynamic"]))


def train(args: list[str], log: Path) -> None:
    with log.open("w") as fh:
        subprocess.run([sys.executable, "-m", "grouprl.cli", "train", *args], stdout=fh, stderr=subprocess.STDOUT,
                       check=True)


def run_seed(out: Path, seed: int) -> None:
    sft = out / f"sft_s{seed}"
    if not (sft / "sft_model").is_dir():
        train(["--model", "tiny", "--seed", str(seed), "--max_steps", "1", "--n_eval", "0", "--num_threads", "1",
               "--output_dir", str(sft)], out / f"sft_s{seed}.log")
    common = ["--model_name_or_path", str(sft / "sft_model"), "--seed", str(seed), "--num_iterations", "2",
              "--num_threads", "1", "--eval_strategy", "steps", "--eval_steps", "50"]
    for name, flags in OBJECTIVES.items():
        run = out / f"{SLUG[name]}_s{seed}"
        if not (run / "summary.json").is_file():
            train(common + flags + ["--output_dir", str(run)], out / f"{SLUG[name]}_s{seed}.log")


def curve(run: Path) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals = {m["step"]: m["eval/accuracy"] for m in lines if "eval/accuracy" in m}
    batches = sum(m.get("dynamic_sampling/batches", 1.0) for m in lines if "step_time" in m)  # training lines only
    return {"before": summary["accuracy_before"], "after": summary["accuracy_after"], "evals": evals,
            "batches": batches, "seconds": summary["wall_seconds"]}


def table(out: Path, seeds: list[int]) -> str:
    rows = ["| objective | seed | before | 100 | 200 | 300 | 400 (end) | batches generated | wall s |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name in OBJECTIVES:
        ends = []
        for seed in seeds:
            run = out / f"{SLUG[name]}_s{seed}"
            if not (run / "summary.json").is_file():
                rows.append(f"| {name} | {seed} | (not run) | | | | | | |")
                continue
            c = curve(run)
            ends.append(c["after"])
            mid = " | ".join(f"{100 * c['evals'].get(s, float('nan')):.1f}" for s in (100, 200, 300))
            rows.append(f"| {name} | {seed} | {100 * c['before']:.1f} % | {mid} | {100 * c['after']:.1f} % | "
                        f"{c['batches']:.0f} | {c['seconds']:.0f} |")
        if len(ends) > 1:
            rows.append(f"| **{name}** | mean ± sd | | | | | **{100 * statistics.mean(ends):.1f} ± "
                        f"{100 * statistics.stdev(ends):.1f} %** | | |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default="runs/objectives")
    parser.add_argument("--table_only", action="store_true", help="only print the table of the runs that exist")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        for seed in args.seeds:
            run_seed(out, seed)
    print(table(out, args.seeds))


if __name__ == "__main__":
    main()
