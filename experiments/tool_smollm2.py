"""The tool recipe on the real instruct model (SmolLM2-135M-Instruct), HF backend, with a short tool SFT first.

Untrained, SmolLM2-135M-Instruct never calls a tool through the Qwen2.5-format template it is given
(its own template has no tools section), so every group scores 0 and RL has no signal. This warms it
with ``--sft_steps`` steps of the same tool SFT the tiny model gets (``job/tool_sft.py``: expert
conversations through its real BPE tokenizer and the template, trained on the assistant's tokens
only), then runs ``grouprl train`` on ``recipes/tiny/tool_arithmetic.yaml`` from it for ``--max_steps``
steps, and writes held-out greedy success before/after, the tool metrics and the times to
``experiments/results/tool_smollm2/results.json``.

    python experiments/tool_smollm2.py --sft_steps 16 --max_steps 3 --n_eval 16
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from rich.console import Console

from grouprl.job.run import run_training
from grouprl.job.tool_sft import tool_sft
from grouprl.observe.jsonl import read_jsonl
from grouprl.rollout.runner import episode_settings
from grouprl.run_config import build_config
from grouprl.tasks import load_task

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny" / "tool_arithmetic.yaml"
KEYS = ("success_rate", "episode_length", "invalid_action_rate", "tools/calls_per_episode", "tools/invalid_call_rate")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=str(Path.home() / ".cache" / "grouprl" / "models" / "smollm2-135m-instruct"))
    parser.add_argument("--sft_steps", type=int, default=16)
    parser.add_argument("--sft_learning_rate", type=float, default=3e-5)
    parser.add_argument("--max_steps", type=int, default=3)
    parser.add_argument("--learning_rate", type=float, default=1e-5)
    parser.add_argument("--n_eval", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results" / "tool_smollm2"))
    parser.add_argument("--work", default=str(ROOT / "outputs" / "tool_smollm2"), help="models and runs (large)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    console, out, work = Console(), Path(args.out), Path(args.work)
    common = {"device": "cpu", "num_threads": args.threads, "n_eval": args.n_eval, "seed": 0}
    cfg = build_config(RECIPE, {**common, "output_dir": str(work / "sft")})
    task = load_task(cfg)
    start = time.perf_counter()
    warm = tool_sft(args.model, task, episode_settings(cfg, task), work / "sft_model", args.sft_steps,
                    args.sft_learning_rate, 4, 0, n_episodes=64, console=console)
    result: dict = {"settings": vars(args), "sft_seconds": time.perf_counter() - start}
    run_cfg = build_config(RECIPE, {**common, "model_name_or_path": str(warm), "output_dir": str(work / "rl"),
                                    "max_steps": args.max_steps, "batch_size": 2, "num_generations": 4,
                                    "learning_rate": args.learning_rate, "save_trajectories_every": 1})
    summary = run_training(run_cfg, console)
    result.update({
        "before": {k: summary["eval_before"].get(k) for k in KEYS},
        "after": {k: summary["eval_after"].get(k) for k in KEYS},
        "rl_wall_seconds": summary["wall_seconds"],
        "steps": [{k: m.get(k) for k in ("step", "success_rate", "tools/calls_per_episode", "tools/invalid_call_rate",
                                          "step_time", "generation_time", "update_time")}
                  for m in read_jsonl(work / "rl" / "metrics.jsonl")],
        "load_average": os.getloadavg(),
    })
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2))
    console.print(result)


if __name__ == "__main__":
    main()
