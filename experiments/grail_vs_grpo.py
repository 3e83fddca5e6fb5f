"""GRAIL against GRPO on the synthetic slate data: the same tiny model, warm start and budget, 3 seeds.

Build the tiny model (word tokenizer) once and warm it with a short SFT on the logged clicks
(seed 0); then, for every seed, train it twice from that same checkpoint with
``recipes/tiny/slates_grail.yaml``, once with the discriminator and mixer (``gail_use: true``) and
once without (plain GRPO), everything else equal (the seed sets sampling, data order and the
discriminator's head). Measured greedy on the validation rows before and after: next-click and
opinion accuracy, parsed and formatted rates; logged every step: alpha (the mixer's base-reward
weight) and the discriminator's accuracy. Writes ``experiments/results/grail_vs_grpo/``
``{results.json, table.md, grail.png}``.

    python experiments/grail_vs_grpo.py                      # 3 seeds x 2 arms, the recipe's budget
    python experiments/grail_vs_grpo.py --seeds 0 --max_steps 4   # a quick look
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console

from grouprl.run_config import build_config
from grouprl.observe.jsonl import read_jsonl
from grouprl.rewards.scorer import Scorer
from grouprl.tasks import load_task
from grouprl.job.run import run_training, seed_everything
from grouprl.job.warm_start import prepare_tiny

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny" / "slates_grail.yaml"
ARMS = {"grail": True, "grpo": False}
MEASURES = ["next_click_accuracy", "opinion_accuracy", "parsed_rate", "formatted_rate"]


def run(seeds: list[int], overrides: dict, out: Path, console: Console) -> dict:
    results: dict = {"recipe": str(RECIPE.relative_to(ROOT)), "overrides": overrides, "runs": []}
    cfg = build_config(RECIPE, {**overrides, "seed": 0, "output_dir": str(out / "warmup")}, environ={})
    warm = out / "warmup" / "sft_model"
    if not (warm / "config.json").is_file():
        seed_everything(0)
        task = load_task(cfg)
        start = time.perf_counter()
        warm = Path(prepare_tiny(cfg, task, Scorer.from_config(cfg, task, learned=[]), console))
        results["warm_start_seconds"] = round(time.perf_counter() - start, 1)
    for seed in seeds:
        base = out / f"seed{seed}"
        for arm, gail in ARMS.items():
            console.rule(f"seed {seed}: {arm}")
            start = time.perf_counter()
            run_cfg = build_config(RECIPE, {**overrides, "seed": seed, "gail_use": gail,
                                            "model_name_or_path": str(warm), "output_dir": str(base / arm)},
                                   environ={})
            summary = run_training(run_cfg, console)
            metrics = read_jsonl(base / arm / "metrics.jsonl")
            run_record = {"seed": seed, "arm": arm, "wall_seconds": round(time.perf_counter() - start, 1),
                          "alpha": [m.get("grail/alpha") for m in metrics],
                          "disc_accuracy": [m.get("disc/accuracy") for m in metrics],
                          "train_reward": [m["reward"] for m in metrics]}
            for key in MEASURES:
                run_record[f"{key}_before"] = summary["eval_before"][key]
                run_record[f"{key}_after"] = summary["eval_after"][key]
            results["runs"].append(run_record)
            (out / "results.json").write_text(json.dumps(results, indent=2))
    return results


def table(results: dict) -> str:
    runs = results["runs"]
    cols = [("next_click_accuracy", "next click"), ("opinion_accuracy", "opinion"), ("parsed_rate", "parsed")]
    head = "| arm | seed | " + " | ".join(f"{h} before | {h} after" for _, h in cols) + " | final alpha | wall s |"
    lines = [head, "|" + "---|" * (2 + 2 * len(cols) + 2)]
    pct = lambda x: f"{100 * x:.1f} %"  # noqa: E731
    for r in runs:
        alpha = r["alpha"][-1] if r["alpha"] and r["alpha"][-1] is not None else None
        lines.append(f"| {r['arm']} | {r['seed']} | " + " | ".join(
            f"{pct(r[k + '_before'])} | {pct(r[k + '_after'])}" for k, _ in cols)
            + f" | {'' if alpha is None else f'{alpha:.3f}'} | {r['wall_seconds']} |")
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        if mine:
            mean = lambda k: sum(r[k] for r in mine) / len(mine)  # noqa: E731
            lines.append(f"| **{arm} mean** | {len(mine)} seeds | " + " | ".join(
                f"**{pct(mean(k + '_before'))}** | **{pct(mean(k + '_after'))}**" for k, _ in cols) + " | | |")
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4))
    colors = {"grail": "tab:blue", "grpo": "tab:orange"}
    for r in runs:
        if r["arm"] == "grail":
            color = f"C{r['seed'] % 10}"
            ax1.plot(range(1, len(r["alpha"]) + 1), r["alpha"], color=color, label=f"seed {r['seed']}")
            ax2.plot(range(1, len(r["disc_accuracy"]) + 1), r["disc_accuracy"], color=color, marker="o",
                     label=f"seed {r['seed']}")
    ax1.set(xlabel="training step", ylabel="alpha (weight of slate_accuracy)", title="mixer: alpha over steps")
    ax2.set(xlabel="training step", ylabel="accuracy on the batch, before its update",
            title="discriminator accuracy")
    ax1.legend(), ax2.legend()
    seeds = sorted({r["seed"] for r in runs})
    width = 0.35
    for j, arm in enumerate(ARMS):
        after = [next((r["next_click_accuracy_after"] for r in runs if r["seed"] == s and r["arm"] == arm), 0)
                 for s in seeds]
        ax3.bar([i + (j - 0.5) * width for i in range(len(seeds))], after, width, label=f"{arm} after",
                color=colors[arm])
    before = [next(r["next_click_accuracy_before"] for r in runs if r["seed"] == s) for s in seeds]
    ax3.scatter(range(len(seeds)), before, color="black", marker="_", s=400, label="before (SFT)", zorder=3)
    ax3.set_xticks(range(len(seeds)), [f"seed {s}" for s in seeds])
    ax3.set(ylabel="validation next-click accuracy (greedy)", title="next click: before and after")
    ax3.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max_steps", type=int, default=None, help="override the recipe's training steps")
    parser.add_argument("--sft_steps", type=int, default=None, help="override the recipe's SFT steps")
    parser.add_argument("--n_train", type=int, default=None, help="override the recipe's training rows")
    parser.add_argument("--n_eval", type=int, default=None, help="override the recipe's validation rows")
    parser.add_argument("--batch_size", type=int, default=None, help="override the recipe's prompts per step")
    parser.add_argument("--sft_batch_size", type=int, default=None, help="override the recipe's SFT batch")
    parser.add_argument("--sft_learning_rate", type=float, default=None, help="override the recipe's SFT lr")
    parser.add_argument("--num_threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results" / "grail_vs_grpo"))
    parser.add_argument("--report_only", action="store_true", help="redraw table and plot from results.json")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    overrides = {k: v for k, v in {"max_steps": args.max_steps, "sft_steps": args.sft_steps, "n_train": args.n_train,
                                   "n_eval": args.n_eval, "num_threads": args.num_threads, "batch_size": args.batch_size,
                                   "sft_batch_size": args.sft_batch_size,
                                   "sft_learning_rate": args.sft_learning_rate}.items() if v is not None}
    console = Console()
    if args.report_only:
        results = json.loads((out / "results.json").read_text())
    else:
        results = run(args.seeds, overrides, out, console)
    (out / "table.md").write_text(table(results))
    plot(results["runs"], out / "grail.png")
    console.print(table(results))
    console.print(f"written: {out / 'results.json'}, {out / 'table.md'}, {out / 'grail.png'}")


if __name__ == "__main__":
    main()
