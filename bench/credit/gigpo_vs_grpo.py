"""Does GiGPO make the tiny model learn the maze faster than GRPO, at equal samples?

For every seed: one warm start (the recipe's tiny model and its SFT, ``job/warm_start.py``), then two
``grouprl train`` runs of ``recipes/tiny/maze_gigpo.yaml`` from that same checkpoint, ``--advantage gigpo``
and ``--advantage grpo``, everything else equal (the same groups, episodes per group and steps: equal
samples). The curves come from each run's own files: per training step, the success rate and the mean
moves of the successful episodes (steps to goal) from ``rollouts/rollouts.jsonl``, anchor shares and
step times from ``metrics.jsonl``. Each estimator's curve is the mean over seeds with its standard
error; the headline is the success rate over the last ``--window`` steps, per seed, and its paired
difference (the two runs of a seed share their warm start).

    python -m bench.credit.gigpo_vs_grpo                      # 5 seeds; bench/credit/results/gigpo_vs_grpo.{json,png}
    python -m bench.credit.gigpo_vs_grpo --seeds 0 --max_steps 5 --out /tmp/look.json   # a quick look
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

from grouprl.job.warm_start import warm_start_alone
from grouprl.run_config import build_config

from bench.common import ROOT, child_pythonpath

RECIPE = ROOT / "recipes" / "tiny" / "maze_gigpo.yaml"
RESULTS = Path(__file__).resolve().parent / "results"
ESTIMATORS = ("gigpo", "grpo")
COLORS = {"gigpo": "tab:blue", "grpo": "tab:orange"}


def child_env() -> dict[str, str]:
    """One torch thread (the machine is shared), the repository's packages on the path."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": child_pythonpath()}


def warm_start(seed: int, folder: Path) -> Path:
    """The seed's tiny model after the recipe's SFT (in a child process; reused when already there)."""
    sft = folder / "warmup" / "sft_model"
    if not (sft / "config.json").is_file():
        os.environ["OMP_NUM_THREADS"] = "1"
        cfg = build_config(RECIPE, {"seed": seed, "output_dir": str(folder / "warmup")}, environ={})
        sft = Path(warm_start_alone(cfg))
    return sft


def train(seed: int, estimator: str, sft: Path, run: Path, max_steps: int) -> float:
    """One ``grouprl train`` run of the recipe from the warm start; its wall seconds."""
    argv = ["--config", str(RECIPE), "--advantage", estimator, "--seed", str(seed), "--max_steps", str(max_steps)]
    argv += ["--model_name_or_path", str(sft), "--output_dir", str(run)]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "grouprl.cli", "train", *argv], env=child_env(), cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"grouprl train {' '.join(argv)} failed (exit {done.returncode})")
    return time.perf_counter() - start


def finite(value):
    """NaN (no successful episode, one seed's error) written as null: the results file stays strict JSON."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    return [finite(v) for v in value] if isinstance(value, list) else value


def known(values) -> list[float]:
    """The values that are numbers (not NaN, not a null read back from the results file)."""
    return [v for v in values if v is not None and v == v]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def curves(run: Path) -> dict[str, list[float]]:
    """Per training step: success rate, mean moves of the successful episodes (NaN if none), mean moves of
    all episodes (a failure counts the cut), anchor share and step seconds."""
    by_step: dict[int, list[dict]] = {}
    for record in read_jsonl(run / "rollouts" / "rollouts.jsonl"):
        by_step.setdefault(record["step"], []).append(record)
    success, to_goal, moves = [], [], []
    for step in sorted(by_step):
        episodes = by_step[step]
        won = [e["episode_length"] for e in episodes if e["correct"]]
        success.append(len(won) / len(episodes))
        to_goal.append(statistics.fmean(won) if won else float("nan"))
        moves.append(statistics.fmean(e["episode_length"] for e in episodes))
    metrics = read_jsonl(run / "metrics.jsonl")
    return {
        "success": success,
        "steps_to_goal": to_goal,
        "episode_length": moves,
        "anchor_nonsingleton_share": [m["anchor_nonsingleton_share"] for m in metrics],
        "step_time": [m["step_time"] for m in metrics],
    }


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error over the finite values (NaN where there are none, or one for the error)."""
    kept = known(values)
    if not kept:
        return float("nan"), float("nan")
    return statistics.fmean(kept), (statistics.stdev(kept) / len(kept) ** 0.5 if len(kept) > 1 else float("nan"))


def band(runs: list[dict], key: str) -> tuple[list[float], list[float]]:
    """Per step: the mean over the runs' curves and its standard error."""
    n = min(len(r["curves"][key]) for r in runs)
    pairs = [mean_se([r["curves"][key][i] for r in runs]) for i in range(n)]
    return [m for m, _ in pairs], [s for _, s in pairs]


def summary(runs: list[dict], window: int) -> dict:
    """Per estimator: first- and last-``window`` success and steps to goal and the success over every step
    (mean, SE over seeds), and the paired gigpo - grpo differences of the last window's and every step's success."""

    def tail(r: dict, key: str, last: bool) -> float:
        values = r["curves"][key][-window:] if last else r["curves"][key][:window]
        kept = known(values)
        return statistics.fmean(kept) if kept else float("nan")

    out: dict = {}
    for est in ESTIMATORS:
        mine = [r for r in runs if r["estimator"] == est]
        out[est] = {
            f"{key}_{part}": dict(zip(("mean", "se"), mean_se([tail(r, key, part == "last") for r in mine])))
            for key in ("success", "steps_to_goal")
            for part in ("first", "last")
        } | {
            "success_all": dict(zip(("mean", "se"), mean_se([statistics.fmean(r["curves"]["success"]) for r in mine]))),
            "seeds": len(mine),
        }
    for name, measure in (
        ("last", lambda r: tail(r, "success", True)),
        ("all", lambda r: statistics.fmean(r["curves"]["success"])),
    ):
        pairs: dict[int, dict[str, float]] = {r["seed"]: {} for r in runs}
        for r in runs:
            pairs[r["seed"]][r["estimator"]] = measure(r)
        diffs = [p["gigpo"] - p["grpo"] for p in pairs.values() if len(p) == 2]
        out[f"paired_success_{name}_difference"] = dict(zip(("mean", "se"), mean_se(diffs))) | {"per_seed": diffs}
    return out


def paired(runs: list[dict], key: str) -> list[dict]:
    """Per seed run by both estimators: a run-like record whose curve is gigpo's minus grpo's."""
    by_seed: dict[int, dict[str, list[float]]] = {}
    for r in runs:
        by_seed.setdefault(r["seed"], {})[r["estimator"]] = r["curves"][key]
    return [
        {"curves": {key: [g - o for g, o in zip(pair["gigpo"], pair["grpo"])]}}
        for pair in by_seed.values()
        if len(pair) == 2
    ]


def plot(runs: list[dict], path: Path, smooth: int = 10) -> None:
    """Success, its paired gigpo - grpo difference, and steps to goal per training step: the mean over
    seeds (moving average of ``smooth`` steps) with a band of two standard errors."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def moving(xs: list[float]) -> list[float]:
        return [
            statistics.fmean(k) if (k := known(xs[max(0, i - smooth + 1) : i + 1])) else float("nan")
            for i in range(len(xs))
        ]

    def draw(ax, mine: list[dict], key: str, color: str, label: str) -> None:
        smoothed = [{"curves": {key: moving(r["curves"][key])}} for r in mine]  # each seed's, then across seeds
        mean, se = band(smoothed, key)
        steps = range(1, len(mean) + 1)
        ax.plot(steps, mean, color=color, label=label)
        low, high = [m - 2 * s for m, s in zip(mean, se)], [m + 2 * s for m, s in zip(mean, se)]
        ax.fill_between(steps, low, high, color=color, alpha=0.2)

    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    for ax, key, title in (
        (axes[0], "success", "success rate"),
        (axes[2], "steps_to_goal", "moves of successful episodes"),
    ):
        for est in ESTIMATORS:
            mine = [r for r in runs if r["estimator"] == est]
            if mine:
                draw(ax, mine, key, COLORS[est], f"{est} (mean of {len(mine)} seeds)")
        ax.set_title(f"maze 6x6, tiny model: {title}")
        ax.set_ylabel(title)
    diffs = paired(runs, "success")
    if diffs:
        draw(axes[1], diffs, "success", "tab:green", f"gigpo - grpo, same seed ({len(diffs)} seeds)")
    axes[1].axhline(0, color="grey", lw=0.8)
    axes[1].set_title("paired difference in success rate")
    axes[1].set_ylabel("success rate difference")
    for ax in axes:
        ax.set_xlabel(f"training step (moving average of {smooth}; band: ± 2 SE over seeds)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(results: dict, window: int) -> str:
    """Per seed: both estimators' first and last ``window`` steps' success and the whole run's; then the
    means with their standard errors and the paired differences."""

    def pct(xs: list[float]) -> str:
        return f"{100 * statistics.fmean(xs):.1f} %"

    lines = [
        f"| seed | estimator | first {window} steps | last {window} steps | all steps | train s |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(results["runs"], key=lambda r: (r["seed"], r["estimator"])):
        s = r["curves"]["success"]
        lines.append(
            f"| {r['seed']} | {r['estimator']} | {pct(s[:window])} | {pct(s[-window:])} | {pct(s)} | {r['train_seconds']} |"
        )
    summ = results["summary"]
    for est in ESTIMATORS:
        cells = [summ[est][k] for k in ("success_first", "success_last", "success_all")]
        lines.append(
            f"| **mean ± SE** | {est} | "
            + " | ".join(f"{100 * c['mean']:.1f} ± {100 * c['se']:.1f} %" for c in cells)
            + " | |"
        )
    last, every = summ["paired_success_last_difference"], summ["paired_success_all_difference"]
    lines.append(
        f"| **paired gigpo - grpo** | | | {100 * last['mean']:+.2f} ± {100 * last['se']:.2f} points "
        f"| {100 * every['mean']:+.2f} ± {100 * every['se']:.2f} points | |"
    )
    return "\n".join(lines)


def run_all(seeds: list[int], max_steps: int, work: Path, out: Path) -> dict:
    """Every seed's warm start and both runs, written to ``out`` after each run (a rerun skips finished ones)."""
    results = json.loads(out.read_text()) if out.is_file() else {"recipe": str(RECIPE.relative_to(ROOT)), "runs": []}
    done = {(r["seed"], r["estimator"]) for r in results["runs"]}
    for seed in seeds:
        folder = work / f"seed{seed}"
        for est in ESTIMATORS:
            if (seed, est) in done:
                continue
            start = time.perf_counter()
            sft = warm_start(seed, folder)
            wall = train(seed, est, sft, folder / est, max_steps)
            results["runs"].append(
                {"seed": seed, "estimator": est, "max_steps": max_steps, "train_seconds": round(wall, 1),
                 "seconds_with_warm_start": round(time.perf_counter() - start, 1),
                 "curves": curves(folder / est)}
            )  # fmt: skip
            out.write_text(json.dumps(finite(results), indent=2))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--max_steps", type=int, default=150, help="training steps of every run")
    parser.add_argument("--window", type=int, default=30, help="steps averaged for the first/last figures")
    parser.add_argument("--work", default="/tmp/grouprl_credit", help="run folders (checkpoints, rollouts)")
    parser.add_argument("--out", default=str(RESULTS / "gigpo_vs_grpo.json"))
    parser.add_argument("--report_only", action="store_true", help="redraw the summary and plot from --out")
    args = parser.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results = (
        json.loads(out.read_text()) if args.report_only else run_all(args.seeds, args.max_steps, Path(args.work), out)
    )
    results["summary"] = summary(results["runs"], args.window)
    out.write_text(json.dumps(finite(results), indent=2))
    plot(results["runs"], out.with_suffix(".png"))
    print(markdown(results, args.window))


if __name__ == "__main__":
    main()
