"""Is GiGPO's step credit informative on the maze, independent of how well a model learns?

On the same rollouts, each step's advantage under every estimator is held against the true advantage
Q*(s, a) - V*(s) of the maze's exact optimal values (``tasks/envs/maze.py``, with the moves left before
the cut: the exact values of the episode as it is run), by Spearman's rank correlation over every step of
a batch. Estimators, all computed by the project's own functions (``algos/advantages.py``, anchors from
``algos/anchors.py`` as the trainer assigns them; ``measure.py``):

- ``grpo``: GRPO's episode advantage (group std), broadcast to the episode's steps;
- ``A_S``: GiGPO's step advantage alone (anchor groups of equal cells, discounted returns);
- ``gigpo w``: A_E + w * A_S (``gigpo_parts`` with ``step_advantage_weight = w``; w = 0 is A_E alone).

Two sources of rollouts:

- epsilon-soft optimal policies (an optimal move with probability 1 - eps, else a uniform one of the
  four), cheap on a CPU and of graded quality: 8 mazes x G episodes a batch, ``--batches`` batches a
  setting (eps, G), on the recipe's maze without its fixed layouts (maze seeds 0..7);
- with ``--runs``, the tiny model's own episodes from training runs of ``recipes/tiny/maze_gigpo.yaml``
  (``rollouts/rollouts.jsonl``, the real rollout path: 4 mazes x 8 episodes a step), replayed by
  ``model_rollouts.py``: the first and the last ``--window`` training steps of each estimator's runs.

The table gives the mean correlation over the batches and its standard error.

    python -m bench.credit.step_credit_signal --runs /tmp/grouprl_credit/seed*/gigpo /tmp/grouprl_credit/seed*/grpo
    # writes bench/credit/results/step_credit_signal.json and .png (the runs: bench/credit/gigpo_vs_grpo.py)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import numpy as np

from bench.credit.measure import Batch, estimates, mean_se, play_batch, spearman

RESULTS = Path(__file__).resolve().parent / "results"


def correlate(batches: list[Batch], gamma: float) -> dict:
    """Success, anchor share and every estimator's correlation (mean and standard error over the batches)."""
    corr: dict[str, list[float]] = {}
    stationary: dict[str, list[float]] = {}
    success, nonsingleton = [], []
    for batch in batches:
        found = estimates(batch, gamma)
        nonsingleton.append(float(found.pop("_nonsingleton").mean()))
        success.append(statistics.fmean(batch.success))
        for name, adv in found.items():
            corr.setdefault(name, []).append(spearman(adv, np.array(batch.true)))
            stationary.setdefault(name, []).append(spearman(adv, np.array(batch.stationary)))
    return {
        "batches": len(batches),
        "success_rate": statistics.fmean(success),
        "anchor_nonsingleton_share": statistics.fmean(nonsingleton),
        "spearman": {k: dict(zip(("mean", "se"), mean_se(v))) for k, v in corr.items()},
        "spearman_stationary": {k: dict(zip(("mean", "se"), mean_se(v))) for k, v in stationary.items()},
    }


def eps_soft_setting(eps: float, group_size: int, args: argparse.Namespace, maze: dict) -> dict:
    """``args.batches`` batches of the eps-soft policy, ``args.mazes`` groups of ``group_size`` each."""
    rng = random.Random(f"credit-{eps}-{group_size}-{args.seed}")
    seeds = list(range(args.mazes))
    batches = [play_batch(seeds, group_size, eps, args.gamma, rng, maze) for _ in range(args.batches)]
    return {"policy": f"eps-soft {eps:g}", "eps": eps, "group_size": group_size} | correlate(batches, args.gamma)


def model_settings(runs: list[Path], window: int) -> list[dict]:
    """The tiny model's episodes: each estimator's runs, their first and last ``window`` training steps."""
    from bench.credit.model_rollouts import batches, recipe_maze

    maze, gamma, penalty = recipe_maze()
    out = []
    for estimator in sorted({run.name for run in runs}):
        mine = [run / "rollouts" / "rollouts.jsonl" for run in runs if run.name == estimator]
        last = max(json.loads(path.read_text().splitlines()[-1])["step"] for path in mine)
        for label, steps in (("first", range(1, window + 1)), ("last", range(last - window + 1, last + 1))):
            found = [b for path in mine for b in batches(path, steps, maze, gamma, penalty)]
            policy = f"tiny model, {estimator} runs, {label} {window} steps"
            out.append({"policy": policy, "group_size": 8, "runs": len(mine)} | correlate(found, gamma))
    return out


def markdown(settings: list[dict]) -> str:
    """One row per setting: success, anchor share and every estimator's correlation (mean +- SE)."""
    names = list(settings[0]["spearman"])
    lines = [
        "| policy | G | success | non-singleton anchors | " + " | ".join(names) + " |",
        "|---|---|---|---|" + "---|" * len(names),
    ]
    for s in settings:
        cells = [f"{s['spearman'][n]['mean']:+.3f} ± {s['spearman'][n]['se']:.3f}" for n in names]
        head = f"| {s['policy']} | {s['group_size']} | {100 * s['success_rate']:.0f} % "
        lines.append(head + f"| {100 * s['anchor_nonsingleton_share']:.0f} % | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(settings: list[dict], path: Path) -> None:
    """One panel per eps: each estimator's correlation against the group size, with 2 SE bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = [s for s in settings if "eps" in s]  # the model's rows are in the table only
    epsilons = sorted({s["eps"] for s in settings})
    names = list(settings[0]["spearman"])
    fig, axes = plt.subplots(1, len(epsilons), figsize=(4.2 * len(epsilons), 4), sharey=True)
    for ax, eps in zip(np.atleast_1d(axes), epsilons):
        mine = [s for s in settings if s["eps"] == eps]
        sizes = [s["group_size"] for s in mine]
        for name in names:
            means = [s["spearman"][name]["mean"] for s in mine]
            bars = [2 * s["spearman"][name]["se"] for s in mine]
            style = "--" if name == "grpo" else "-"  # GRPO ranks steps as A_E does here (binary scores)
            ax.errorbar(sizes, means, yerr=bars, marker="o", capsize=3, label=name, linestyle=style)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(g) for g in sizes])
        ax.set_xlabel("group size G")
        ax.set_title(f"eps-soft optimal, eps = {eps:g} ({100 * mine[0]['success_rate']:.0f} % success)")
    np.atleast_1d(axes)[0].set_ylabel("Spearman vs Q* - V* (mean ± 2 SE)")
    np.atleast_1d(axes)[-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eps", type=float, nargs="+", default=[0.3, 0.6, 0.9])
    parser.add_argument("--group_sizes", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--mazes", type=int, default=8, help="groups per batch (maze seeds 0..N-1)")
    parser.add_argument("--batches", type=int, default=20, help="independent batches per setting")
    parser.add_argument("--max_steps", type=int, default=30, help="the episode's cut (the recipe's)")
    parser.add_argument("--gamma", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=Path, nargs="*", default=[], help="training run folders named gigpo/grpo")
    parser.add_argument("--window", type=int, default=10, help="training steps of the runs' first and last rows")
    parser.add_argument("--out", default=str(RESULTS / "step_credit_signal.json"))
    args = parser.parse_args()
    maze = {"size": 6, "wall_fraction": 0.3, "min_path": 10, "max_steps": args.max_steps}
    start = time.perf_counter()
    settings = [eps_soft_setting(eps, g, args, maze) for eps in args.eps for g in args.group_sizes]
    settings += model_settings(args.runs, args.window) if args.runs else []
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "maze": maze}
    result["wall_seconds"] = round(time.perf_counter() - start, 1)
    out.write_text(json.dumps({**result, "settings": settings}, indent=2, default=str))
    plot(settings, out.with_suffix(".png"))
    print(markdown(settings))
    print(f"wrote {out} and {out.with_suffix('.png')} ({result['wall_seconds']} s)")


if __name__ == "__main__":
    main()
