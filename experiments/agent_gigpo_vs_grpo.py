"""Per-turn credit through the agent endpoint: GiGPO (tool-state anchors) against GRPO, same budget, 3 seeds.

The task is ``tool_arithmetic`` with ``tool_questions: convert`` (``recipes/tiny/tool_conversion_agent.yaml``):
every episode is a chain of dependent calls -- ``lookup`` the factor, ``calculator`` on the question's number
and the looked-up factor, then ``Answer:`` -- played by ``examples/agents/calculator_agent.py`` through the
OpenAI-compatible endpoint. One tiny model is built and warmed by tool SFT on expert conversion chains,
stopped at the first check (every 50 steps, 32 sampled conversations) reaching ``--sft_target`` success, so
each step is done sometimes and the whole chain rarely. From that one checkpoint each seed trains twice,
``--advantage gigpo`` and ``--advantage grpo``, everything else equal. Held-out success (greedy, the agent
path, ``--n_eval`` rows) is measured on the SFT model and on each run's final checkpoint, with each step of
the chain on its own (``steps/convert/lookup_right``, ``compute_right``, ``answer_right``), and the training
runs' anchor statistics. Results are written after every run to ``--out``/results.json.

    python experiments/agent_gigpo_vs_grpo.py                           # 3 seeds x 2 estimators, 40 steps of 4 x 8
    python experiments/agent_gigpo_vs_grpo.py --seeds 0 --max_steps 2 --n_eval 16 --out /tmp/probe
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from rich.console import Console

from grouprl.job.evaluate import ENV_CHECK_EPISODES, check_accuracy, evaluate
from grouprl.job.run import run_training
from grouprl.job.tool_sft import sft_conversations, tool_sft
from grouprl.observe.jsonl import read_jsonl
from grouprl.models.loading import load_policy
from grouprl.models.tiny import init_tiny
from grouprl.rewards.scorer import Scorer
from grouprl.rollout.generation import HFBackend, SamplingParams
from grouprl.rollout.runner import episode_settings
from grouprl.run_config import build_config
from grouprl.tasks import load_task

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny" / "tool_conversion_agent.yaml"
EVAL_KEYS = ("success_rate", "episode_length", "invalid_action_rate", "agent/calls_per_episode",
             "steps/convert/lookup_right", "steps/convert/compute_right", "steps/convert/answer_right",
             "steps/convert/compute_right_given_lookup_right", "steps/convert/compute_right_given_lookup_wrong")
TRAIN_KEYS = ("anchor_nonsingleton_share", "anchor_nonsingleton_share_later_turns", "step_advantage_abs",
              "agent/calls_per_episode", "tools/invalid_call_rate")


def held_out(cfg, model_dir: str) -> dict[str, float]:
    """Greedy success on the held-out rows, through the recipe's agent."""
    task = load_task(cfg)
    policy = load_policy(cfg.model, model_dir, torch.device("cpu"), need_reference=False)
    result = evaluate(HFBackend(policy.model, policy.tokenizer, policy.device), policy.tokenizer, task,
                      task.eval_rows[: cfg.eval.n_eval], SamplingParams.for_eval(cfg), Scorer.from_config(cfg, task),
                      settings=episode_settings(cfg, task))
    return {k: result[k] for k in EVAL_KEYS if k in result} | {"n": result["n"]}


def warm_start(cfg, task, out: Path, console: Console) -> dict:
    """The shared SFT checkpoint (built once; reused while ``warmup/sft_model`` exists)."""
    sft_model, info = out / "warmup" / "sft_model", out / "warmup" / "sft_info.json"
    if not (sft_model / "config.json").is_file():
        start = time.perf_counter()
        tiny = init_tiny(task.tokenizer_corpus(), out / "warmup" / "tiny_model", cfg.model.tiny_hidden_size,
                         cfg.model.tiny_num_layers, cfg.model.tiny_num_heads, seed=0,
                         tokenizer=task.tiny_tokenizer, max_positions=task.tiny_max_positions)
        sft_conversations(cfg, task, Scorer.from_config(cfg, task), str(tiny), episode_settings(cfg, task), console)
        info.write_text(json.dumps({"sft_seconds": time.perf_counter() - start, "load_average": os.getloadavg()}))
    return json.loads(info.read_text())


def continue_warm_start(cfg, task, out: Path, steps: int, console: Console) -> dict:
    """Up to ``steps`` more SFT steps on the shared checkpoint, with the same stop rule (checked every 50
    steps on 32 sampled training conversations); recorded in ``sft_info.json`` as ``continued``."""
    sft_model, info_path = out / "warmup" / "sft_model", out / "warmup" / "sft_info.json"
    info = json.loads(info_path.read_text())
    start = time.perf_counter()
    scorer, settings = Scorer.from_config(cfg, task), episode_settings(cfg, task)
    measure = check_accuracy(task, scorer, task.train_rows[:ENV_CHECK_EPISODES],
                             SamplingParams.for_rollout(cfg, batch_size=ENV_CHECK_EPISODES), settings)
    checks: list[float] = []

    def stop_when(model, tokenizer) -> bool:
        checks.append(measure(model, tokenizer)["success_rate"])
        console.log(f"continued SFT check {len(checks)}: sampled success {checks[-1]:.3f}")
        return checks[-1] >= cfg.train.sft_target_accuracy

    tool_sft(str(sft_model), task, settings, out / "warmup" / "sft_model_continued", steps, cfg.train.sft_learning_rate,
             cfg.train.sft_batch_size, seed=1, n_episodes=cfg.train.sft_demo_episodes, stop_when=stop_when,
             check_every=50, console=console)
    sft_model.rename(out / "warmup" / "sft_model_first")
    (out / "warmup" / "sft_model_continued").rename(sft_model)
    info.setdefault("continued", []).append({"max_steps": steps, "steps": 50 * len(checks) if checks and checks[-1]
                                             >= cfg.train.sft_target_accuracy else steps, "checks": checks,
                                             "seconds": time.perf_counter() - start, "load_average": os.getloadavg()})
    info_path.write_text(json.dumps(info))
    return info


def train_run(recipe_overrides: dict, run_dir: Path, eval_cfg, console: Console) -> dict:
    """One RL run (no built-in evaluations: the greedy one before is the same for every run), then the
    held-out evaluation of its final checkpoint."""
    cfg = build_config(RECIPE, {**recipe_overrides, "n_eval": 0, "output_dir": str(run_dir)})
    start = time.perf_counter()
    summary = run_training(cfg, console)
    seconds = time.perf_counter() - start
    metrics = list(read_jsonl(run_dir / "metrics.jsonl"))
    half = max(1, len(metrics) // 2)
    mean = lambda rows, key: sum(m.get(key, 0.0) for m in rows) / max(len(rows), 1)  # noqa: E731
    return {"train_seconds": seconds,
            "train_success_first_half": mean(metrics[:half], "success_rate"),
            "train_success_second_half": mean(metrics[half:], "success_rate"),
            **{f"train/{k}": mean(metrics, k) for k in TRAIN_KEYS},
            "after": held_out(eval_cfg, summary["final_checkpoint"]), "load_average": os.getloadavg()}


def summarise(results: dict) -> dict:
    """Per estimator: the mean and spread of held-out success after RL over the seeds, and per seed GiGPO - GRPO."""
    out: dict = {}
    for estimator in ("gigpo", "grpo"):
        runs = [r for r in results["runs"] if r["estimator"] == estimator]
        for key in ("success_rate", "steps/convert/lookup_right", "steps/convert/compute_right"):
            values = [r["after"].get(key, 0.0) for r in runs]
            if values:
                out[f"{estimator}/{key}/mean"] = statistics.fmean(values)
                out[f"{estimator}/{key}/sd"] = statistics.stdev(values) if len(values) > 1 else 0.0
    by_seed = {(r["seed"], r["estimator"]): r["after"]["success_rate"] for r in results["runs"]}
    out["gigpo_minus_grpo_per_seed"] = {s: by_seed[(s, "gigpo")] - by_seed[(s, "grpo")] for s, e in by_seed
                                        if e == "gigpo" and (s, "grpo") in by_seed}
    p, n = results["before"]["success_rate"], max(results["before"]["n"], 1)
    out["binomial_se_at_before"] = (p * (1 - p) / n) ** 0.5  # one evaluation's sampling noise, for scale
    return out


def reevaluate(cfg, out: Path, console: Console) -> None:
    """The held-out evaluation again, on the SFT model and every run's final checkpoint, added to results.json
    as ``reevaluated`` (greedy, so the success rates must match; the task's measures may have grown since)."""
    results = json.loads((out / "results.json").read_text())
    again = {"before": held_out(cfg, str(out / "warmup" / "sft_model"))}
    for run in results["runs"]:
        name = f"seed{run['seed']}/{run['estimator']}"
        again[name] = held_out(cfg, str(out / name / f"checkpoint-{results['settings']['max_steps']}"))
        console.log(f"{name}: {again[name]}")
    results["reevaluated"] = again
    (out / "results.json").write_text(json.dumps(results, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max_steps", type=int, default=40)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--num_generations", type=int, default=8)
    parser.add_argument("--n_eval", type=int, default=200)
    parser.add_argument("--sft_target", type=float, default=0.15, help="sampled success that stops the tool SFT")
    parser.add_argument("--sft_steps", type=int, default=600, help="the most SFT steps")
    parser.add_argument("--sft_continue", type=int, default=0,
                        help="continue the existing warm start by up to this many SFT steps (same stop rule), then stop")
    parser.add_argument("--reevaluate", action="store_true",
                        help="evaluate the SFT model and the runs' final checkpoints again, into results.json")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: steadiest on a shared machine)")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results" / "agent_gigpo_vs_grpo"))
    args = parser.parse_args()
    console, out = Console(), Path(args.out)
    torch.set_num_threads(args.threads)
    common = {"max_steps": args.max_steps, "batch_size": args.batch_size, "num_generations": args.num_generations,
              "device": "cpu", "num_threads": args.threads}
    cfg = build_config(RECIPE, {**common, "n_eval": args.n_eval, "output_dir": str(out / "warmup"), "seed": 0,
                                "sft_steps": args.sft_steps, "sft_target_accuracy": args.sft_target})
    task = load_task(cfg)
    results: dict = {"recipe": str(RECIPE.relative_to(ROOT)), "settings": vars(args), "runs": [],
                     "load_average_at_start": os.getloadavg(), "sft": warm_start(cfg, task, out, console)}
    if args.reevaluate:
        reevaluate(cfg, out, console)
        return
    if args.sft_continue:
        continue_warm_start(cfg, task, out, args.sft_continue, console)
        return
    sft_model = out / "warmup" / "sft_model"
    results["before"] = held_out(cfg, str(sft_model))
    console.log(f"before RL (SFT model), held-out greedy: {results['before']}")
    for seed in args.seeds:
        for estimator in ("gigpo", "grpo"):
            overrides = {**common, "seed": seed, "advantage": estimator, "model_name_or_path": str(sft_model)}
            run = train_run(overrides, out / f"seed{seed}" / estimator, cfg, console)
            results["runs"].append({"seed": seed, "estimator": estimator, **run})
            results["summary"] = summarise(results)
            out.mkdir(parents=True, exist_ok=True)
            (out / "results.json").write_text(json.dumps(results, indent=2))
            console.log(results["runs"][-1])


if __name__ == "__main__":
    main()
