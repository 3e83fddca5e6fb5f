"""GiGPO against GRPO on gridworld with the same tiny model, the same budget and 3 seeds.

For every seed: build the tiny model and warm it with SFT on random admissible moves (the
action format, not the task), then train it twice from that same checkpoint, once with
``--advantage gigpo`` and once with ``--advantage grpo``, everything else equal (the recipe
``recipes/tiny/gridworld_gigpo.yaml``). Measured before and after: success on the 32
training maps (8 sampled episodes per map, and greedy), and greedy success on 100 held-out
maps (seeds no training episode uses). Writes
``experiments/results/gigpo_vs_grpo/{results.json,table.md,success.png}``.

    python experiments/gigpo_vs_grpo.py                   # 3 seeds x 2 estimators
    python experiments/gigpo_vs_grpo.py --seeds 0 --max_steps 10   # a quick look
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from grouprl.run_config import build_config
from grouprl.observe.jsonl import read_jsonl
from grouprl.models.loading import load_policy
from grouprl.tasks import load_task
from grouprl.rewards.scorer import Scorer
from grouprl.rollout.generation import HFBackend, SamplingParams
from grouprl.rollout.runner import episode_settings
from grouprl.job.evaluate import evaluate
from grouprl.job.run import run_training, seed_everything
from grouprl.job.warm_start import prepare_tiny

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny" / "gridworld_gigpo.yaml"
ESTIMATORS = ["gigpo", "grpo"]


def train_maps_success(cfg, model_dir: str, samples: int = 0) -> float:
    """Success on the recipe's training maps (the levels RL practised on): greedy, or with
    ``samples`` > 0 sampled at the rollout temperature, ``samples`` episodes per map (seeded)."""
    import torch

    task = load_task(cfg)
    policy = load_policy(cfg.model, model_dir, torch.device("cpu"), need_reference=False)
    params, rows = SamplingParams.for_eval(cfg), task.train_rows
    if samples:
        params = SamplingParams.for_rollout(cfg, batch_size=256)
        rows = [row for row in task.train_rows for _ in range(samples)]
        torch.manual_seed(1234)
    result = evaluate(HFBackend(policy.model, policy.tokenizer, policy.device), policy.tokenizer, task, rows, params,
                      Scorer.from_config(cfg, task), settings=episode_settings(cfg, task))
    return result["success_rate"]


def rescore(results: dict, out: Path, samples: int = 8) -> None:
    """Add sampled success on the training maps (before: the seed's SFT model; after: the run's
    final checkpoint) to every run of results.json. Both estimators of a seed share its SFT
    model, so its "before" is measured once."""
    before: dict[int, float] = {}
    for r in results["runs"]:
        base = out / f"seed{r['seed']}"
        cfg = build_config(RECIPE, {"seed": r["seed"], "output_dir": str(base / r["estimator"])})
        if "train_maps_sampled_before" not in r:
            if r["seed"] not in before:
                before[r["seed"]] = train_maps_success(cfg, str(base / "warmup" / "sft_model"), samples)
            r["train_maps_sampled_before"] = before[r["seed"]]
            final = sorted((base / r["estimator"]).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))[-1]
            r["train_maps_sampled_after"] = train_maps_success(cfg, str(final), samples)
        (out / "results.json").write_text(json.dumps(results, indent=2))


def run(seeds: list[int], max_steps: int | None, out: Path, console: Console) -> dict:
    results: dict = {"recipe": str(RECIPE.relative_to(ROOT)), "runs": []}
    for seed in seeds:
        base_dir = out / f"seed{seed}"
        cfg = build_config(RECIPE, {"seed": seed, "output_dir": str(base_dir / "warmup")})
        sft_model = base_dir / "warmup" / "sft_model"
        if not (sft_model / "config.json").is_file():
            seed_everything(seed)
            task = load_task(cfg)
            sft_model = Path(prepare_tiny(cfg, task, Scorer.from_config(cfg, task), console))
        train_before = train_maps_success(cfg, str(sft_model))
        for estimator in ESTIMATORS:
            cli = {"seed": seed, "advantage": estimator, "model_name_or_path": str(sft_model),
                   "output_dir": str(base_dir / estimator)}
            if max_steps:
                cli["max_steps"] = max_steps
            console.rule(f"seed {seed}: {estimator}")
            start = time.perf_counter()
            run_cfg = build_config(RECIPE, cli)
            summary = run_training(run_cfg, console)
            train_after = train_maps_success(run_cfg, summary["final_checkpoint"])
            metrics = read_jsonl(base_dir / estimator / "metrics.jsonl")
            results["runs"].append({
                "seed": seed, "estimator": estimator,
                "success_before": summary["eval_before"]["success_rate"],
                "success_after": summary["eval_after"]["success_rate"],
                "train_maps_before": train_before, "train_maps_after": train_after,
                "invalid_after": summary["eval_after"]["invalid_action_rate"],
                "episode_length_after": summary["eval_after"]["episode_length"],
                "wall_seconds": round(time.perf_counter() - start, 1),
                "train_success": [m["success_rate"] for m in metrics],
                "anchor_nonsingleton_share": sum(m["anchor_nonsingleton_share"] for m in metrics) / len(metrics),
            })
            (out / "results.json").write_text(json.dumps(results, indent=2))
    return results


COLUMNS = [  # (results key, header)
    ("rollout_success_first30", "training rollouts: first 30 steps"), ("rollout_success_last30", "last 30"),
    ("train_maps_sampled_before", "training maps, sampled: before"), ("train_maps_sampled_after", "after"),
    ("train_maps_before", "training maps, greedy: before"), ("train_maps_after", "after"),
    ("success_before", "held-out maps, greedy: before"), ("success_after", "after"),
]


def report(results: dict, out: Path, console: Console) -> None:
    runs = results["runs"]
    for r in runs:  # the training batches' own success rate (sampled), early vs late
        r["rollout_success_first30"] = sum(r["train_success"][:30]) / len(r["train_success"][:30])
        r["rollout_success_last30"] = sum(r["train_success"][-30:]) / len(r["train_success"][-30:])
    cols = [(k, h) for k, h in COLUMNS if all(k in r for r in runs)]
    pct = lambda x: f"{100 * x:.1f} %"  # noqa: E731
    table = Table(title="gridworld 4x4 success rate (32 training maps x 8 sampled episodes; greedy: 1 each; "
                        "100 held-out maps)")
    for col in ["estimator", "seed", *[h for _, h in cols], "wall s"]:
        table.add_column(col)
    lines = ["| estimator | seed | " + " | ".join(h for _, h in cols) + " |", "|---|---|" + "---|" * len(cols)]
    for r in runs:
        table.add_row(r["estimator"], str(r["seed"]), *[pct(r[k]) for k, _ in cols], str(r["wall_seconds"]))
        lines.append(f"| {r['estimator']} | {r['seed']} | " + " | ".join(pct(r[k]) for k, _ in cols) + " |")
    for est in ESTIMATORS:
        mine = [r for r in runs if r["estimator"] == est]
        if mine:
            means = [pct(sum(r[k] for r in mine) / len(mine)) for k, _ in cols]
            lines.append(f"| **{est} mean** | {len(mine)} seeds | " + " | ".join(f"**{m}**" for m in means) + " |")
    console.print(table)
    (out / "table.md").write_text("\n".join(lines) + "\n")
    plot(runs, out / "success.png")


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"gigpo": "tab:blue", "grpo": "tab:orange"}
    for est in ESTIMATORS:
        curves = [r["train_success"] for r in runs if r["estimator"] == est]
        if not curves:
            continue
        n = min(len(c) for c in curves)
        mean = [sum(c[i] for c in curves) / len(curves) for i in range(n)]
        window = 15
        smooth = [sum(mean[max(0, i - window + 1): i + 1]) / len(mean[max(0, i - window + 1): i + 1])
                  for i in range(n)]
        for c in curves:
            ax1.plot(range(1, len(c) + 1), c, color=colors[est], alpha=0.15)
        ax1.plot(range(1, n + 1), smooth, color=colors[est], label=f"{est} (mean of {len(curves)} seeds)")
    ax1.set_xlabel("training step")
    ax1.set_ylabel("training success rate (sampled)")
    ax1.set_title("gridworld 4x4: success during training")
    ax1.legend()
    seeds = sorted({r["seed"] for r in runs})
    width = 0.35
    key = "train_maps_sampled" if all("train_maps_sampled_after" in r for r in runs) else "train_maps"
    for j, est in enumerate(ESTIMATORS):
        after = [next((r[f"{key}_after"] for r in runs if r["seed"] == s and r["estimator"] == est), 0)
                 for s in seeds]
        ax2.bar([i + (j - 0.5) * width for i in range(len(seeds))], after, width, label=est, color=colors[est])
    before = [next(r[f"{key}_before"] for r in runs if r["seed"] == s) for s in seeds]
    ax2.scatter(range(len(seeds)), before, color="black", marker="_", s=400, label="before (SFT)", zorder=3)
    ax2.set_xticks(range(len(seeds)), [f"seed {s}" for s in seeds])
    ax2.set_ylabel("success on the 32 training maps" + (" (sampled)" if key == "train_maps_sampled" else ""))
    ax2.set_title("after training")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max_steps", type=int, default=None, help="override the recipe's training steps")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results" / "gigpo_vs_grpo"))
    parser.add_argument("--report_only", action="store_true", help="redraw table and plot from results.json")
    parser.add_argument("--num_threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--no_rescore", action="store_true", help="skip the sampled evaluation on training maps")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    console = Console()
    if args.num_threads:
        import torch

        torch.set_num_threads(args.num_threads)
    results = json.loads((out / "results.json").read_text()) if args.report_only else \
        run(args.seeds, args.max_steps, out, console)
    if not args.no_rescore:
        rescore(results, out)
    report(results, out, console)


if __name__ == "__main__":
    main()
