"""Tool calling: success before/after RL, and GiGPO (tool-state anchors) against GRPO, same budget, 3 seeds.

One tiny model is built and warmed by SFT on expert tool conversations (``job/tool_sft.py``), shared
by every run. From that checkpoint each seed trains twice, once with ``--advantage gigpo`` (anchor
states = the tool-interaction state) and once with ``--advantage grpo``, everything else equal
(``recipes/tiny/tool_arithmetic.yaml``, with ``--max_steps`` and the batch set here). Success is
greedy on held-out questions before (the SFT model) and after each run, plus the training rollouts'
success over the first and last steps. Results are written after every run to
``experiments/results/tool_gigpo_vs_grpo/results.json`` (so a cut-short experiment still reports).

    python experiments/tool_gigpo_vs_grpo.py                        # 3 seeds x 2 estimators, 60 steps of 4 x 8
    python experiments/tool_gigpo_vs_grpo.py --seeds 0 --max_steps 2  # a quick look

The warm start (built once, reused while ``warmup/sft_model`` exists) takes 4-5 minutes on one CPU thread,
each run of 60 steps 5-8 more (load 10-15).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from rich.console import Console

from grouprl.job.evaluate import evaluate
from grouprl.job.run import run_training
from grouprl.job.tool_sft import sft_conversations
from grouprl.observe.jsonl import read_jsonl
from grouprl.models.loading import load_policy
from grouprl.models.tiny import init_tiny
from grouprl.rewards.scorer import Scorer
from grouprl.rollout.generation import HFBackend, SamplingParams
from grouprl.rollout.runner import episode_settings
from grouprl.run_config import build_config
from grouprl.tasks import load_task

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny" / "tool_arithmetic.yaml"


def held_out_success(cfg, model_dir: str) -> dict[str, float]:
    task = load_task(cfg)
    policy = load_policy(cfg.model, model_dir, torch.device("cpu"), need_reference=False)
    result = evaluate(HFBackend(policy.model, policy.tokenizer, policy.device), policy.tokenizer, task,
                      task.eval_rows, SamplingParams.for_eval(cfg), Scorer.from_config(cfg, task),
                      settings=episode_settings(cfg, task))
    return {k: result[k] for k in ("success_rate", "episode_length", "invalid_action_rate")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max_steps", type=int, default=60)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--num_generations", type=int, default=8)
    parser.add_argument("--n_eval", type=int, default=500)
    parser.add_argument("--sft_steps", type=int, default=None, help="the recipe's sft_steps unless given")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: steadiest on a shared machine)")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results" / "tool_gigpo_vs_grpo"))
    args = parser.parse_args()
    console, out = Console(), Path(args.out)
    torch.set_num_threads(args.threads)
    common = {"max_steps": args.max_steps, "batch_size": args.batch_size, "num_generations": args.num_generations,
              "n_eval": args.n_eval, "device": "cpu", "num_threads": args.threads}
    sft = {"sft_steps": args.sft_steps} if args.sft_steps else {}
    cfg = build_config(RECIPE, {**common, "output_dir": str(out / "warmup"), "seed": 0, **sft})
    task = load_task(cfg)
    sft_model = out / "warmup" / "sft_model"
    results: dict = {"recipe": str(RECIPE.relative_to(ROOT)), "settings": vars(args), "runs": [],
                     "load_average_at_start": os.getloadavg()}
    if not (sft_model / "config.json").is_file():
        start = time.perf_counter()
        tiny = init_tiny(task.tokenizer_corpus(), out / "warmup" / "tiny_model", cfg.model.tiny_hidden_size,
                         cfg.model.tiny_num_layers, cfg.model.tiny_num_heads, seed=0,
                         tokenizer=task.tiny_tokenizer, max_positions=task.tiny_max_positions)
        # the recipe's warm start: up to sft_steps, stopped at the first check (every 50 steps, 32 sampled
        # training conversations) reaching sft_target_accuracy, so RL starts from a partial imitation
        sft_conversations(cfg, task, Scorer.from_config(cfg, task), str(tiny), episode_settings(cfg, task), console)
        (out / "warmup" / "sft_info.json").write_text(json.dumps({"sft_seconds": time.perf_counter() - start,
                                                                  "load_average": os.getloadavg()}))
    results["sft"] = json.loads((out / "warmup" / "sft_info.json").read_text())
    results["before"] = held_out_success(cfg, str(sft_model))
    console.log(f"before RL (SFT model), held-out greedy: {results['before']}")
    for seed in args.seeds:
        for estimator in ("gigpo", "grpo"):
            run_dir = out / f"seed{seed}" / estimator
            run_cfg = build_config(RECIPE, {**common, "seed": seed, "advantage": estimator,
                                            "model_name_or_path": str(sft_model), "output_dir": str(run_dir)})
            start = time.perf_counter()
            summary = run_training(run_cfg, console)
            metrics = list(read_jsonl(run_dir / "metrics.jsonl"))
            half = max(1, len(metrics) // 2)
            results["runs"].append({
                "seed": seed, "estimator": estimator, "seconds": time.perf_counter() - start,
                "train_success_first_half": sum(m["success_rate"] for m in metrics[:half]) / half,
                "train_success_second_half": sum(m["success_rate"] for m in metrics[half:]) / max(1, len(metrics) - half),
                "after": {k: summary["eval_after"][k] for k in ("success_rate", "episode_length", "invalid_action_rate")},
                "anchor_nonsingleton_share": sum(m["anchor_nonsingleton_share"] for m in metrics) / len(metrics),
                "invalid_call_rate": sum(m["tools/invalid_call_rate"] for m in metrics) / len(metrics),
                "load_average": os.getloadavg(),
            })
            out.mkdir(parents=True, exist_ok=True)
            (out / "results.json").write_text(json.dumps(results, indent=2))
            console.log(results["runs"][-1])


if __name__ == "__main__":
    main()
