"""Rollout throughput with slow environments: in the trainer process vs spread over Ray workers.

    python -m bench.rollouts.env_scaling                  # 32 envs, 10 steps of 50 ms, workers 1 2 4
    python -m bench.rollouts.env_scaling --envs 64 --workers 1 2 4 8 --rounds 2
    python -m bench.rollouts.env_scaling --work spin      # CPU-bound steps instead of sleeping ones
    python -m bench.rollouts.env_scaling --no-e2e         # the pool alone (skip the tiny-model runner)

The environment (``SlowEnv``) spends ``--step-ms`` per ``step`` (sleeping, like an env that waits
on a simulator, a browser or a tool; ``--work spin`` burns that much CPU time instead, so it
scales with cores, not workers) and ``--reset-ms`` per
``reset``; every episode lasts exactly ``--episode-steps`` steps. Workers = 1 is ``LocalEnvPool``
(envs in this process); N > 1 is ``RayEnvPool(N)`` on a local Ray cluster started here.

Three measurements per worker count, each the best of ``--rounds`` rollouts after a warm-up:

1. **pool**: ``start`` then ``step`` in a loop the way the runner drives a pool (every step, all
   live envs' actions in one ``step`` call) until every episode is done. Env steps/s, episodes/s,
   speedup vs 1 worker, and how far the rollout is above the ideal (``ceil(envs / workers)``
   envs' worth of env time per worker; this includes ``time.sleep`` overshooting, ~0.2-0.7 ms
   per sleep on a busy VM, so it is not all pool overhead).
2. **overhead**: the same loop with a zero-cost environment (``--step-ms 0 --reset-ms 0``): what a
   Ray round trip costs per ``step`` call when the envs are free.
3. **e2e** (if ``run_episodes`` takes ``pool=``): ``grouprl.rollout.runner.run_episodes`` with a
   tiny random Qwen2 model generating every action (``--new-tokens`` tokens per action; the whole
   completion is the action, so every step reaches the environment), ``--envs / --group-size``
   groups, ``--threads`` torch threads (default 1: with 2 threads on a 2-core machine that
   something else also uses, ``generate`` time swung from 0.5 s to 8.7 s per rollout; with 1
   it stays at ~0.2 s). The zero-cost-env row (``gen only``) is the generation +
   prompt-building floor.

Prints rich tables and writes ``bench/rollouts/results/env_scaling.json``.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from grouprl.records import Observation, StepResult
from grouprl.rollout.env_pool import LocalEnvPool

HERE = Path(__file__).resolve().parent


class SlowEnv:
    """Every step costs ``step_s`` seconds (sleep or CPU spin); done after ``episode_steps`` steps."""

    instructions = "Say anything."

    def __init__(self, step_s: float, reset_s: float, episode_steps: int, work: str = "sleep"):
        self.step_s, self.reset_s, self.episode_steps, self.work = step_s, reset_s, episode_steps, work
        self.seed, self.steps = 0, 0

    def _spend(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if self.work == "sleep":
            time.sleep(seconds)
        else:
            end = time.process_time() + seconds  # CPU time: a descheduled spinner does not finish early
            while time.process_time() < end:
                pass

    def _observation(self) -> Observation:
        return Observation(text=f"seed {self.seed}, step {self.steps}", anchor_state=(self.seed, self.steps))

    def reset(self, seed: int | None = None) -> Observation:
        self._spend(self.reset_s)
        self.seed, self.steps = seed or 0, 0
        return self._observation()

    def step(self, action: str) -> StepResult:
        self._spend(self.step_s)
        self.steps += 1
        done = self.steps >= self.episode_steps
        return StepResult(self._observation(), float(done), done, {"step": self.steps, "action_chars": len(action)})


def make_pool(workers: int):
    if workers <= 1:
        return LocalEnvPool()
    from grouprl.rollout.ray_pool import RayEnvPool

    return RayEnvPool(workers)


def drive(pool, factories, seeds) -> tuple[float, int, int, int]:
    """One rollout through the pool: (seconds, env steps, episodes done, step calls)."""
    t0 = time.perf_counter()
    pool.start(factories, seeds)
    live, n_steps, n_done, n_calls = list(range(len(factories))), 0, 0, 0
    while live:
        results = pool.step(live, ["a"] * len(live))
        n_calls += 1
        n_steps += len(live)
        n_done += sum(r.done for r in results)
        live = [i for i, r in zip(live, results) if not r.done]
    return time.perf_counter() - t0, n_steps, n_done, n_calls


def bench_pool(workers: int, factory, n_envs: int, rounds: int, ideal_per_env: float) -> dict:
    pool = make_pool(workers)
    try:
        t_create = time.perf_counter()
        drive(pool, [factory] * workers, list(range(workers)))  # warm-up: actors up, code shipped
        warmup_s = time.perf_counter() - t_create
        runs = [drive(pool, [factory] * n_envs, list(range(n_envs))) for _ in range(rounds)]
    finally:
        pool.close()
    seconds, n_steps, n_done, n_calls = min(runs)
    ideal = math.ceil(n_envs / workers) * ideal_per_env
    return {
        "workers": workers,
        "pool": type(pool).__name__,
        "seconds": seconds,
        "all_seconds": [r[0] for r in runs],
        "env_steps": n_steps,
        "episodes": n_done,
        "step_calls": n_calls,
        "steps_per_s": n_steps / seconds,
        "episodes_per_s": n_done / seconds,
        "ideal_seconds": ideal,
        "first_use_seconds": warmup_s,
    }


def bench_e2e(workers_list: list[int], args, factory, zero_factory) -> list[dict]:
    import torch

    from grouprl.models.tiny import build_tiny_model, build_tokenizer
    from grouprl.rollout.generation import HFBackend, SamplingParams
    from grouprl.rollout.runner import EpisodeSettings, run_episodes

    tokenizer = build_tokenizer("abcdefghijklmnopqrstuvwxyz 0123456789,.Say anything.seed step")
    model = build_tiny_model(tokenizer, hidden=64, layers=2, heads=4, seed=0)
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0)
    settings = EpisodeSettings(
        max_steps=args.episode_steps,
        history_length=0,
        action_pattern=None,
        invalid_action_penalty=0.0,
        show_admissible_actions=False,
    )
    n_groups = args.envs // args.group_size
    rows = [{"group": g} for g in range(n_groups)]
    seeds = list(range(n_groups))
    device = torch.device("cpu")
    torch.set_num_threads(args.threads)

    def rollout(pool, make) -> tuple[float, int, int]:
        t0 = time.perf_counter()
        episodes = run_episodes(
            [make] * n_groups,
            rows,
            args.group_size,
            HFBackend(model, tokenizer, device),
            tokenizer,
            params,
            settings=settings,
            seeds=seeds,
            pool=pool,
        )
        seconds = time.perf_counter() - t0
        steps = sum(len(e.steps) for e in episodes)
        assert all(e.done for e in episodes) and steps == args.envs * args.episode_steps, "episodes cut short"
        return seconds, steps, len(episodes)

    out = []
    cases = [("gen only", 1, zero_factory)] + [(f"{w} worker{'s' * (w > 1)}", w, factory) for w in workers_list]
    for label, workers, make in cases:
        pool = make_pool(workers)
        try:
            rollout(pool, make)  # warm-up
            # The zero-cost-env floor is short and CPU-bound (noisy on a shared machine): more tries.
            runs = [rollout(pool, make) for _ in range(args.rounds if make is factory else max(args.rounds, 3))]
        finally:
            pool.close()
        seconds, steps, episodes = min(runs)
        out.append(
            {
                "case": label,
                "workers": workers,
                "seconds": seconds,
                "all_seconds": [r[0] for r in runs],
                "env_steps": steps,
                "episodes": episodes,
                "steps_per_s": steps / seconds,
                "episodes_per_s": episodes / seconds,
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=32)
    ap.add_argument("--episode-steps", type=int, default=10)
    ap.add_argument("--step-ms", type=float, default=50.0)
    ap.add_argument("--reset-ms", type=float, default=5.0)
    ap.add_argument("--work", choices=["sleep", "spin"], default="sleep")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--rounds", type=int, default=1, help="rollouts per measurement (the best is kept)")
    ap.add_argument("--overhead-rounds", type=int, default=5)
    ap.add_argument("--no-e2e", action="store_true", help="skip the run_episodes measurement")
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="torch threads for e2e generation")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "env_scaling.json")
    args = ap.parse_args()
    console = Console(width=120)

    import ray

    t0 = time.perf_counter()
    ray.init(include_dashboard=False, object_store_memory=128 * 1024 * 1024, log_to_driver=False)
    ray_init_s = time.perf_counter() - t0

    factory = functools.partial(SlowEnv, args.step_ms / 1000, args.reset_ms / 1000, args.episode_steps, args.work)
    zero = functools.partial(SlowEnv, 0.0, 0.0, args.episode_steps, args.work)
    ideal_per_env = args.reset_ms / 1000 + args.episode_steps * args.step_ms / 1000

    pool_rows = [bench_pool(w, factory, args.envs, args.rounds, ideal_per_env) for w in args.workers]
    overhead_rows = [bench_pool(w, zero, args.envs, args.overhead_rounds, 0.0) for w in args.workers]
    base = {"pool": pool_rows[0]["seconds"], "overhead": overhead_rows[0]["seconds"]}
    for r in pool_rows:
        r["speedup"] = base["pool"] / r["seconds"]
    for r in overhead_rows:
        r["speedup"] = base["overhead"] / r["seconds"]

    from grouprl.rollout.runner import run_episodes

    e2e_rows: list[dict] = []
    e2e_skipped = None
    if args.no_e2e:
        e2e_skipped = "--no-e2e"
    elif "pool" not in inspect.signature(run_episodes).parameters:
        e2e_skipped = "run_episodes has no pool= parameter"
    elif args.envs % args.group_size:
        e2e_skipped = f"--envs {args.envs} is not a multiple of --group-size {args.group_size}"
    else:
        e2e_rows = bench_e2e(args.workers, args, factory, zero)
        one = next(r for r in e2e_rows if r["case"].startswith("1 worker"))
        for r in e2e_rows:
            r["speedup"] = one["seconds"] / r["seconds"]

    title = (
        f"{args.envs} envs x {args.episode_steps} steps, {args.step_ms:g} ms/step ({args.work}), "
        f"{args.reset_ms:g} ms/reset; {os.cpu_count()} CPUs"
    )
    table = Table(title=f"pool: {title}")
    for col in ["workers", "pool", "rollout s", "ideal s", "env steps/s", "episodes/s", "speedup", "above ideal"]:
        table.add_column(col, justify="right")
    for r in pool_rows:
        table.add_row(
            str(r["workers"]),
            r["pool"],
            f"{r['seconds']:.2f}",
            f"{r['ideal_seconds']:.2f}",
            f"{r['steps_per_s']:.0f}",
            f"{r['episodes_per_s']:.1f}",
            f"{r['speedup']:.2f}x",
            f"{100 * (r['seconds'] / r['ideal_seconds'] - 1):.1f}%" if r["ideal_seconds"] else "-",
        )
    console.print(table)
    table = Table(title=f"overhead: {args.envs} zero-cost envs x {args.episode_steps} steps")
    for col in ["workers", "rollout ms", "ms per step call", "env steps/s"]:
        table.add_column(col, justify="right")
    for r in overhead_rows:
        table.add_row(
            str(r["workers"]),
            f"{1000 * r['seconds']:.1f}",
            f"{1000 * r['seconds'] / (r['step_calls'] + 1):.2f}",
            f"{r['steps_per_s']:.0f}",
        )
    console.print(table)
    if e2e_rows:
        table = Table(
            title=f"e2e run_episodes: tiny model, {args.envs // args.group_size} groups x "
            f"{args.group_size}, {args.new_tokens} new tokens/action"
        )
        for col in ["case", "rollout s", "of which env s", "env steps/s", "episodes/s", "speedup vs 1 worker"]:
            table.add_column(col, justify="right")
        floor = e2e_rows[0]["seconds"]
        for r in e2e_rows:
            gen_only = r["case"] == "gen only"
            table.add_row(
                r["case"],
                f"{r['seconds']:.2f}",
                "-" if gen_only else f"{r['seconds'] - floor:.2f}",
                f"{r['steps_per_s']:.0f}",
                f"{r['episodes_per_s']:.1f}",
                "-" if gen_only else f"{r['speedup']:.2f}x",
            )
        console.print(table)
    else:
        console.print(f"e2e skipped: {e2e_skipped}")

    result = {
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "environment": {
            "python": platform.python_version(),
            "ray": ray.__version__,
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "ray_init_seconds": ray_init_s,
            "loadavg_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        },
        "pool": pool_rows,
        "overhead": overhead_rows,
        "e2e": e2e_rows,
        "e2e_skipped": e2e_skipped,
        "speedup_vs_1_worker": {str(r["workers"]): r["speedup"] for r in pool_rows},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.out}")
    ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
