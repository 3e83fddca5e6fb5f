"""Is learning lost by asynchronous rollouts? ``sync`` against ``async`` (``max_staleness 1``) on the tiny
job (``grouprl train --model tiny``: 2-digit addition, 16 prompts x 8 completions a step), the same warm
model, the same number of samples, several seeds.

The tiny job's warm start runs once (``--model``: or reuse a run's ``sft_model``); every run then trains
``--steps`` GRPO steps from it with the tiny job's settings and is evaluated greedily on ``--n_eval``
held-out sums before and after (the job's own evaluation). Reports held-out accuracy after training
per mode: each seed, mean and spread. Writes ``experiments/results/async_learning/{results.json,table.md}``.

    python experiments/async_learning.py --steps 400 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = {"sync": [], "async": ["--rollout_mode", "async", "--max_staleness", "1", "--max_inflight", "2"]}


def run(model: str, out: Path, seed: int, steps: int, n_eval: int, extra: list[str]) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    model_flag = ["--model_name_or_path", model] if model else []
    cmd = [sys.executable, "-m", "grouprl.cli", "train", *model_flag, "--output_dir", str(out),
           "--max_steps", str(steps), "--n_eval", str(n_eval), "--device", "cpu", "--seed", str(seed), *extra]
    with (out.parent / "runs.log").open("ab") as log:
        if subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
            raise SystemExit(f"{out} failed; see {out.parent / 'runs.log'}")
    summary = json.loads((out / "summary.json").read_text())
    return {"before": summary["accuracy_before"], "after": summary["accuracy_after"],
            "wall_seconds": summary["wall_seconds"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a warm tiny model (a run's sft_model); else warmed here")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--n_eval", type=int, default=200)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    out = ROOT / "experiments" / "results" / "async_learning"
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"async_learning_{int(time.time())}"
    work.mkdir(parents=True)
    if args.model is None:  # the tiny job's warm start (and one step), once for every run
        run("", work / "warm", 0, 1, 0, ["--model", "tiny"])
        args.model = str(work / "warm" / "sft_model")
    results: dict = {"steps": args.steps, "n_eval": args.n_eval, "load_before": os.getloadavg(), "runs": {}}
    for seed in args.seeds:
        for mode, extra in MODES.items():
            results["runs"][f"{mode}/{seed}"] = run(args.model, work / f"{mode}_{seed}", seed, args.steps, args.n_eval,
                                                    extra)
            print(mode, seed, results["runs"][f"{mode}/{seed}"], flush=True)
    results["load_after"] = os.getloadavg()
    lines = ["| mode | " + " | ".join(f"seed {s}" for s in args.seeds) + " | mean | spread (max - min) |",
             "|---|" + "---|" * (len(args.seeds) + 2)]
    for mode in MODES:
        after = [results["runs"][f"{mode}/{s}"]["after"] for s in args.seeds]
        results[mode] = {"mean": statistics.mean(after), "spread": max(after) - min(after)}
        lines.append(f"| {mode} | " + " | ".join(f"{a:.3f}" for a in after)
                     + f" | {results[mode]['mean']:.3f} | {results[mode]['spread']:.3f} |")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
