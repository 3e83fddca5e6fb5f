"""The main job's learning result: SmolLM2-135M-Instruct, 2-digit additions asked in words, 3 seeds.

Each seed is the README's ``grouprl train --seed S`` (the main job, ``src/grouprl/config/main_job.py``),
with ``--use_peft true`` and a LoRA learning rate for the LoRA comparison. Writes
``experiments/results/smollm2_arithmetic/{results.json,table.md}`` and ``docs/smollm2_arithmetic.png``:
held-out greedy accuracy (n = 200) before and after per run, and the training reward per step.

    python experiments/smollm2_arithmetic.py                       # seeds 0 1 2, full fine-tuning
    python experiments/smollm2_arithmetic.py --seeds 0 --lora      # the LoRA twin of seed 0
    python experiments/smollm2_arithmetic.py --collect RUN_DIR ... # only the table and plot of finished runs
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results" / "smollm2_arithmetic"
PLOT = ROOT / "docs" / "smollm2_arithmetic.png"
LORA = ["--use_peft", "true", "--lora_r", "16", "--lora_alpha", "32", "--lora_dropout", "0", "--lora_target_modules",
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "--learning_rate", "5e-5"]


def run(seed: int, lora: bool, out: Path, threads: int | None) -> Path:
    cmd = [sys.executable, "-m", "grouprl.cli", "train", "--seed", str(seed), "--output_dir", str(out),
           "--overwrite_output_dir", "true"] + (LORA if lora else [])
    if threads:
        cmd += ["--num_threads", str(threads)]
    subprocess.run(cmd, check=True)
    return out


def collect(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    uptime = run_dir / "uptime.txt"  # the machine's load beside the timing, when the runner recorded it
    return {"run": run_dir.name, "seed": config["train"]["seed"], "lora": config["model"]["use_peft"],
            "learning_rate": config["train"]["learning_rate"], "before": summary["accuracy_before"],
            "after": summary["accuracy_after"], "n_eval": summary["n_eval"], "wall_seconds": summary["wall_seconds"],
            "threads": config["runtime"]["num_threads"], "load": uptime.read_text().strip() if uptime.is_file() else "",
            "reward": [m["reward"] for m in steps if "reward" in m]}


def table(rows: list[dict]) -> str:
    lines = ["| run | seed | fine-tuning | lr | before | after | gain | n | job time (s) | threads |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['run']} | {r['seed']} | {'LoRA r16' if r['lora'] else 'full'} | {r['learning_rate']:g} | "
                     f"{100 * r['before']:.1f} % | {100 * r['after']:.1f} % | {100 * (r['after'] - r['before']):+.1f} | "
                     f"{r['n_eval']} | {r['wall_seconds']:.0f} | {r['threads'] or 'default'} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bars, curves) = plt.subplots(1, 2, figsize=(11, 4))
    for i, r in enumerate(rows):
        label = f"{r['run']} ({'LoRA' if r['lora'] else 'full'})"
        bars.bar([i - 0.2, i + 0.2], [100 * r["before"], 100 * r["after"]], width=0.4,
                 color=["#999999", "#1f77b4" if not r["lora"] else "#ff7f0e"])
        bars.text(i + 0.2, 100 * r["after"] + 1, f"{100 * r['after']:.1f}", ha="center", fontsize=8)
        bars.text(i - 0.2, 100 * r["before"] + 1, f"{100 * r['before']:.1f}", ha="center", fontsize=8)
        window = 5  # the reward of 16 completions is noisy: a running mean over 5 steps
        smooth = [sum(r["reward"][max(0, k - window + 1): k + 1]) / len(r["reward"][max(0, k - window + 1): k + 1])
                  for k in range(len(r["reward"]))]
        curves.plot(range(1, len(smooth) + 1), smooth, label=label)
    bars.set_xticks(range(len(rows)), [r["run"] for r in rows], fontsize=8)
    bars.set_ylabel("held-out greedy accuracy (%)")
    bars.set_title(f"before (grey) and after GRPO, n = {rows[0]['n_eval']}")
    curves.set_xlabel("GRPO step")
    curves.set_ylabel("training reward (running mean of 5 steps)")
    curves.set_title("reward of the step's 16 sampled completions")
    curves.legend(fontsize=8)
    fig.suptitle("SmolLM2-135M-Instruct, 'Compute a + b. Reply with only the number.', grouprl on a CPU")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--lora", action="store_true", help="LoRA r16 on every linear layer, lr 5e-5")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "smollm2_arithmetic")
    parser.add_argument("--collect", type=Path, nargs="+", help="finished run folders: only the table and plot")
    args = parser.parse_args()
    dirs = args.collect or [run(s, args.lora, args.out / f"{'lora' if args.lora else 'full'}_seed{s}", args.threads)
                            for s in args.seeds]
    rows = [collect(d) for d in dirs]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    (RESULTS / "table.md").write_text(table(rows))
    plot(rows, PLOT)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
