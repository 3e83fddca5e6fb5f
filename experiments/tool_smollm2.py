"""A real instruct model learns the tools: SmolLM2-135M-Instruct, tool SFT, then RL through the example agent.

Untrained, SmolLM2-135M-Instruct never calls a tool (its own template has no tools section; grouprl
renders Qwen2.5's tool format for it, ``tools/chat_template.py``), so every group scores 0 and RL has
no signal. This driver

1. warms it with the tool SFT (``job/tool_sft.py``: expert conversations through its real BPE
   tokenizer and the tool template, loss on the assistant's tokens only), stopping at the first check
   (every ``--check_every`` steps) where greedy success on ``--n_check`` *training* rows reaches
   ``--sft_target``, so RL starts from a model that solves some rows and fails others;
2. measures held-out greedy success once on that model (``before``: the same for every seed);
3. for each seed, runs ``grouprl train`` on ``recipes/tiny/tool_arithmetic_agent.yaml`` from it: the
   example agent (``examples/agents/calculator_agent.py``, a plain ``openai``-SDK loop) drives the
   policy through grouprl's OpenAI-compatible endpoint, unchanged; GiGPO on tool-state anchors;
4. measures held-out greedy success of each seed's final checkpoint (``after``), through the same
   agent, and writes everything to ``experiments/results/tool_smollm2/results.json`` (+ a plot).

    OMP_NUM_THREADS=1 python experiments/tool_smollm2.py --seeds 0 1 2 --n_eval 100
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
CONVERSATION_RECIPE = ROOT / "recipes" / "tiny" / "tool_arithmetic.yaml"  # the SFT's expert conversations
AGENT_RECIPE = ROOT / "recipes" / "tiny" / "tool_arithmetic_agent.yaml"  # RL and evaluation: the example agent
SMOLLM2 = Path.home() / ".cache" / "grouprl" / "models" / "smollm2-135m-instruct"
# a tool call is ~35 SmolLM2 tokens (one per digit), the answer ~10: 64 new tokens a turn cut no solution short and
# stop greedy rambling early (the recipe's 112 suits the tiny model's word tokens)
MAX_NEW_TOKENS = 64
EVAL_BATCH = 20  # requests per generate call: 100 at once held ~7 GB (KV caches) and met the OOM killer here
# the recipe's 300 s per episode is a latency guard; 100 agents sharing one loaded CPU thread (load ~15 on 2
# cores) took longer than that to finish, so every episode failed as timed out: this measures learning, not latency
EPISODE_TIMEOUT = 7200.0
KEYS = ("accuracy", "episode_length", "invalid_action_rate", "agent/calls_per_episode", "agent/failed_episodes")
STEP_KEYS = ("step", "reward", "success_rate", "agent/calls_per_episode", "agent/failed_episodes", "step_time",
             "generation_time", "update_time")


def recipe_config(recipe: Path, model: str | Path, threads: int, **overrides: Any):
    from grouprl.run_config import build_config

    return build_config(recipe, {"model_name_or_path": str(model), "device": "cpu", "num_threads": threads,
                                 "episode_timeout": EPISODE_TIMEOUT, **overrides}, environ={})


def held_out(model: str | Path, rows_from: int, n: int, threads: int, out: Path | None = None) -> dict[str, Any]:
    """Greedy success of ``model`` on held-out rows ``rows_from .. rows_from + n`` of the task, each
    played by the example agent through the endpoint; success split by question kind."""
    from grouprl.job.evaluate import evaluate
    from grouprl.models.loading import load_policy
    from grouprl.rewards.scorer import Scorer
    from grouprl.rollout.generation import SamplingParams, make_backend
    from grouprl.rollout.runner import episode_settings
    from grouprl.tasks import load_task

    cfg = recipe_config(AGENT_RECIPE, model, threads, n_eval=rows_from + n, max_new_tokens=MAX_NEW_TOKENS,
                        eval_batch_size=EVAL_BATCH)
    task = load_task(cfg)
    rows = task.eval_rows[rows_from:rows_from + n]
    policy = load_policy(cfg.model, str(model), torch.device("cpu"), need_reference=False)
    start = time.perf_counter()
    result = evaluate(make_backend(policy, cfg), policy.tokenizer, task, rows, SamplingParams.for_eval(cfg),
                      Scorer.from_config(cfg, task), out, episode_settings(cfg, task))
    kept = {k: result.get(k) for k in KEYS}
    if out is not None:  # success by kind, read off the per-episode records (same order as the rows)
        records = [json.loads(line) for line in Path(out).read_text().splitlines()]
        kinds: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
        for row, record in zip(rows, records):
            kinds[row["kind"]][0] += int(bool(record["correct"]))
            kinds[row["kind"]][1] += 1
        kept["by_kind"] = {k: {"solved": s, "n": t} for k, (s, t) in sorted(kinds.items())}
    kept.update(n=len(rows), seconds=round(time.perf_counter() - start, 1))
    return kept


def warm_start(model: str | Path, out: Path, steps: int, learning_rate: float, batch_size: int, check_every: int,
               n_check: int, target: float, threads: int, console: Console) -> dict[str, Any]:
    """The tool SFT, stopped at the first check where greedy success on ``n_check`` training rows (through
    the agent, as RL will play them) reaches ``target``; returns where the model is and what the checks saw."""
    from grouprl.job.evaluate import check_accuracy
    from grouprl.rewards.scorer import Scorer
    from grouprl.rollout.generation import SamplingParams
    from grouprl.rollout.runner import episode_settings
    from grouprl.job.tool_sft import tool_sft
    from grouprl.tasks import load_task

    sft_cfg = recipe_config(CONVERSATION_RECIPE, model, threads)
    task = load_task(sft_cfg)
    agent_cfg = recipe_config(AGENT_RECIPE, model, threads)
    measure = check_accuracy(task, Scorer.from_config(agent_cfg, task), task.train_rows[:n_check],
                             SamplingParams.for_eval(agent_cfg), episode_settings(agent_cfg, task))
    checks: list[dict[str, float]] = []

    def stop_when(policy, tokenizer) -> bool:
        checks.append({"step": check_every * (len(checks) + 1), "train_success": measure(policy, tokenizer)["accuracy"]})
        console.log(f"tool SFT check: {checks[-1]}")
        return checks[-1]["train_success"] >= target

    start = time.perf_counter()
    path = tool_sft(str(model), task, episode_settings(sft_cfg, task), out, steps, learning_rate, batch_size, 0,
                    n_episodes=max(64, steps * batch_size), stop_when=stop_when, check_every=check_every,
                    console=console)
    return {"model": str(path), "checks": checks, "seconds": round(time.perf_counter() - start, 1)}


def rl_run(warm: str | Path, out: Path, seed: int, max_steps: int, batch_size: int, num_generations: int,
           learning_rate: float, threads: int, console: Console, temperature: float = 1.0,
           gradient_accumulation_steps: int = 1) -> dict[str, Any]:
    """``grouprl train`` with the example agent from the warm model; no evaluation inside (the driver
    measures before once and after per seed on the same rows); the final checkpoint and the step metrics."""
    from grouprl.job.run import run_training
    from grouprl.observe.jsonl import read_jsonl

    cfg = recipe_config(AGENT_RECIPE, warm, threads, output_dir=str(out), seed=seed, max_steps=max_steps,
                        batch_size=batch_size, num_generations=num_generations, learning_rate=learning_rate,
                        n_eval=0, save_steps=max_steps, max_new_tokens=MAX_NEW_TOKENS, overwrite_output_dir=True,
                        save_trajectories_every=1, logging_steps=1, temperature=temperature,
                        gradient_accumulation_steps=gradient_accumulation_steps)
    summary = run_training(cfg, console)
    return {"checkpoint": summary["final_checkpoint"], "wall_seconds": summary["wall_seconds"],
            "steps": [{k: m.get(k) for k in STEP_KEYS} for m in read_jsonl(out / "metrics.jsonl")]}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3))
    names = ["before RL"] + [f"after, seed {seed}" for seed in result["seeds"]]
    values = [result["before"]["accuracy"]] + [run["after"]["accuracy"] for run in result["seeds"].values()]
    ax.bar(names, values, color=["grey"] + ["tab:blue"] * len(result["seeds"]))
    ax.set(ylabel=f"held-out success (n={result['before']['n']}, greedy)", ylim=(0, 1),
           title="SmolLM2-135M-Instruct through the example agent")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=str(SMOLLM2))
    parser.add_argument("--warm", help="a results.json of an earlier run: reuse its SFT model (no SFT here) and, "
                        "where it measured the same n_eval, its before measurement, and the seeds it finished with the same RL settings")
    parser.add_argument("--sft_steps", type=int, default=20, help="at most; the check may stop it earlier")
    parser.add_argument("--sft_learning_rate", type=float, default=3e-5)
    parser.add_argument("--sft_batch_size", type=int, default=4)
    parser.add_argument("--check_every", type=int, default=2)
    parser.add_argument("--n_check", type=int, default=16, help="training rows of the SFT's stop check (greedy)")
    parser.add_argument("--sft_target", type=float, default=0.25)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max_steps", type=int, default=6)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--num_generations", type=int, default=4)
    parser.add_argument("--learning_rate", type=float, default=2e-5)
    parser.add_argument("--gradient_accumulation_steps", type=int, default=1,
                        help="micro-batches per update (a step of 4 x 8 conversations in one backward needs ~10 GB)")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="rollout temperature of the RL runs (the held-out measurements stay greedy)")
    parser.add_argument("--n_eval", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results" / "tool_smollm2"))
    parser.add_argument("--work", default=str(ROOT / "outputs" / "tool_smollm2"), help="models and runs (large)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    console, out, work = Console(), Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"settings": vars(args), "load_average_start": os.getloadavg(), "seeds": {}}
    earlier = json.loads(Path(args.warm).read_text()) if args.warm else {}
    result["sft"] = earlier.get("sft") or warm_start(args.model, work / "sft_model", args.sft_steps,
                                                     args.sft_learning_rate, args.sft_batch_size, args.check_every,
                                                     args.n_check, args.sft_target, args.threads, console)
    save = lambda: (out / "results.json").write_text(json.dumps(result, indent=2))  # noqa: E731 - after each part
    if earlier.get("before", {}).get("n") == args.n_eval:  # the same model on the same rows: measured already
        result["before"] = earlier["before"]
    else:
        result["before"] = held_out(result["sft"]["model"], 0, args.n_eval, args.threads, work / "before.jsonl")
    console.log(f"held-out before RL: {result['before']}")
    save()
    rl_keys = ("max_steps", "batch_size", "num_generations", "learning_rate", "n_eval", "temperature",
               "gradient_accumulation_steps")
    same_rl = all(earlier.get("settings", {}).get(k) == getattr(args, k) for k in rl_keys)
    for seed in args.seeds:
        if same_rl and str(seed) in earlier.get("seeds", {}):  # finished earlier with the same RL settings
            result["seeds"][str(seed)] = earlier["seeds"][str(seed)]
            continue
        run = rl_run(result["sft"]["model"], work / f"rl_seed{seed}", seed, args.max_steps, args.batch_size,
                     args.num_generations, args.learning_rate, args.threads, console, args.temperature,
                     args.gradient_accumulation_steps)
        run["after"] = held_out(run["checkpoint"], 0, args.n_eval, args.threads, work / f"after_seed{seed}.jsonl")
        console.log(f"seed {seed}: held-out after RL: {run['after']}")
        result["seeds"][str(seed)] = run
        save()
    afters = [run["after"]["accuracy"] for run in result["seeds"].values()]
    result["after_mean"] = sum(afters) / len(afters)
    result["load_average_end"] = os.getloadavg()
    save()
    plot(result, out / "held_out.png")
    return result


if __name__ == "__main__":
    main()
