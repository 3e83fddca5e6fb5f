"""Is learning lost by asynchronous rollouts? ``sync`` against ``async`` (``max_staleness 1``, ``max_inflight 2``)
at the same number of samples, several seeds, on three jobs (``--job``):

- ``tiny``: ``grouprl train --model tiny``'s settings (2-digit addition, 16 prompts x 8 completions a step);
- ``main``: the main job, ``grouprl train`` with no arguments (SmolLM2-135M-Instruct, 2-digit addition,
  20 steps of 2 prompts x 8 completions; no warm start, every run starts from the packaged model);
- ``tool``: the tiny tool recipe (``recipes/tiny/tool_arithmetic.yaml``: GiGPO over tool-calling
  conversations, 20 steps of 4 prompts x 4 conversations).

A tiny job's warm start runs once (or ``--model``: a run's ``sft_model``) and every run trains from it.
Each run is evaluated greedily on ``--n_eval`` held-out rows before and after (the job's own
evaluation). Reports held-out accuracy after training per mode (each seed, mean, spread) and the
training accuracy per step (``curves.png``: each seed thin, the mean of the seeds thick). A run whose
``summary.json`` exists in ``--work`` is not run again (an interrupted experiment resumes; ``--modes`` runs one
mode, so that two instances can run the modes side by side on one ``--work``). Writes
``experiments/results/async_learning/<job>/{results.json,table.md,curves.png}``.

    python experiments/async_learning.py --job tiny --steps 400 --seeds 0 1 2
    python experiments/async_learning.py --job main --seeds 0 1 2
    python experiments/async_learning.py --job tool --seeds 0 1 2 --n_eval 100
    python experiments/async_learning.py --job tool --seeds 0 1 2 3 4 --n_eval 100 --learning_rate 2.5e-4

``--learning_rate`` overrides the job's own for every run (the warm start keeps its own) and writes to
``experiments/results/async_learning/<job>_lr<rate>/``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = {"sync": [], "async": ["--rollout_mode", "async", "--max_staleness", "1", "--max_inflight", "2"]}
TOOL_RECIPE = ["--config", str(ROOT / "recipes" / "tiny" / "tool_arithmetic.yaml")]
COLLAPSE = 0.5  # a run whose held-out accuracy after RL is below this share of its accuracy before collapsed
# per job: the flags of every run, and the warm start's flags (None: no warm start, the job's own model)
JOBS: dict[str, tuple[list[str], list[str] | None]] = {
    "tiny": ([], ["--model", "tiny"]),
    "main": ([], None),
    "tool": (TOOL_RECIPE, TOOL_RECIPE),
}


def run(model: str, out: Path, seed: int, steps: int | None, n_eval: int, extra: list[str]) -> dict:
    if not (out / "summary.json").is_file():
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
        model_flag = ["--model_name_or_path", model] if model else []
        steps_flag = ["--max_steps", str(steps)] if steps else []
        cmd = [sys.executable, "-m", "grouprl.cli", "train", *extra, *model_flag, *steps_flag, "--output_dir",
               str(out), "--n_eval", str(n_eval), "--device", "cpu", "--seed", str(seed)]
        load_before = os.getloadavg()
        with (out.parent / "runs.log").open("ab") as log:
            if subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
                raise SystemExit(f"{out} failed; see {out.parent / 'runs.log'}")
        (out / "load.json").write_text(json.dumps({"before": load_before, "after": os.getloadavg()}))
    for checkpoint in out.glob("checkpoint-*"):  # (also a run finished by an interrupted experiment)
        shutil.rmtree(checkpoint)
    summary = json.loads((out / "summary.json").read_text())
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    curve = [(m["step"], m["accuracy"]) for m in metrics if "accuracy" in m and "step" in m]
    times = [m["step_time"] for m in metrics if "step_time" in m][1:]  # the first step starts the producer
    return {"before": summary["accuracy_before"], "after": summary["accuracy_after"],
            "wall_seconds": summary["wall_seconds"], "step_time_mean": statistics.mean(times) if times else None,
            "load": json.loads((out / "load.json").read_text()) if (out / "load.json").is_file() else None,
            "train_accuracy": curve}


def plot(results: dict, seeds: list[int], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for mode, colour in zip(MODES, ("tab:blue", "tab:orange")):
        curves = [results["runs"][f"{mode}/{s}"]["train_accuracy"] for s in seeds]
        for curve in curves:
            ax.plot([c[0] for c in curve], [c[1] for c in curve], color=colour, alpha=0.25, lw=0.8)
        length = min(len(c) for c in curves)
        mean = [statistics.mean(c[i][1] for c in curves) for i in range(length)]
        after = results[mode]["mean"]
        ax.plot([c[0] for c in curves[0][:length]], mean, color=colour, lw=2,
                label=f"{mode} (held-out after: {after:.3f})")
    ax.set_xlabel("step (same samples per step in both modes)")
    ax.set_ylabel("training accuracy (sampled)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", choices=sorted(JOBS), default="tiny")
    parser.add_argument("--model", default=None, help="a warm model (a tiny run's sft_model); else warmed here")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per run (default: the job's own)")
    parser.add_argument("--n_eval", type=int, default=200)
    parser.add_argument("--learning_rate", type=float, default=None,
                        help="the RL learning rate of every run (default: the job's own; the warm start keeps its own)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--modes", nargs="+", choices=sorted(MODES), default=list(MODES),
                        help="run only these (two instances on one --work run side by side; a last one reports)")
    parser.add_argument("--work", type=Path, default=None, help="run directories (reused: finished runs are kept)")
    args = parser.parse_args()
    name = args.job if args.learning_rate is None else f"{args.job}_lr{args.learning_rate:g}"
    out = ROOT / "experiments" / "results" / "async_learning" / name
    work = args.work or Path(os.environ.get("TMPDIR", "/tmp")) / f"async_learning_{args.job}_{int(time.time())}"
    work.mkdir(parents=True, exist_ok=True)
    flags, warm_flags = JOBS[args.job]
    if args.learning_rate is not None:  # after the recipe's flags, so it wins
        flags = [*flags, "--learning_rate", str(args.learning_rate)]
    if args.model is None and warm_flags is not None:  # the tiny warm start (and one step), once for every run
        run("", work / "warm", 0, 1, 0, warm_flags)
        args.model = str(work / "warm" / "sft_model")
    results: dict = {"job": args.job, "steps": args.steps, "learning_rate": args.learning_rate, "n_eval": args.n_eval,
                     "work": str(work),
                     "load_before": os.getloadavg(), "runs": {}}
    for seed in args.seeds:
        for mode, extra in MODES.items():
            if mode not in args.modes:
                continue
            results["runs"][f"{mode}/{seed}"] = run(args.model or "", work / f"{mode}_{seed}", seed, args.steps,
                                                    args.n_eval, [*flags, *extra])
            print(mode, seed, {k: v for k, v in results["runs"][f"{mode}/{seed}"].items() if k != "train_accuracy"},
                  flush=True)
    results["load_after"] = os.getloadavg()
    if len(results["runs"]) < len(MODES) * len(args.seeds):
        return  # one mode of a pair: the report comes from a run over both
    lines = ["| mode | " + " | ".join(f"seed {s}" for s in args.seeds)
             + " | mean | spread (max - min) | mean without collapses | collapses |",
             "|---|" + "---|" * (len(args.seeds) + 4)]
    for mode in MODES:
        runs = [results["runs"][f"{mode}/{s}"] for s in args.seeds]
        after = [r["after"] for r in runs]
        # a collapse: held-out accuracy after RL below half of what the same warm model had before it
        kept = [r["after"] for r in runs if r["after"] >= COLLAPSE * r["before"]]
        results[mode] = {"mean": statistics.mean(after), "spread": max(after) - min(after),
                         "collapses": len(after) - len(kept), "mean_without_collapses": statistics.mean(kept)
                         if kept else None}
        lines.append(f"| {mode} | " + " | ".join(f"{a:.3f}" for a in after)
                     + f" | {results[mode]['mean']:.3f} | {results[mode]['spread']:.3f} | "
                     + (f"{statistics.mean(kept):.3f}" if kept else "-") + f" | {len(after) - len(kept)} |")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    rate = "" if args.learning_rate is None else f", lr {args.learning_rate:g}"
    plot(results, args.seeds, out / "curves.png", f"{args.job} job{rate}: sync vs async (max_staleness 1), "
         f"{len(args.seeds)} seeds, held-out n = {args.n_eval}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
