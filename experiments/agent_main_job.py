"""The agent main job's learning result: SmolLM2-135M-Instruct learns the calculator through the example agent.

Each seed is the README's ``grouprl train --config recipes/SmolLM2-135M-Instruct/grpo/config_tool_agent.yaml
--seed S``: the tool SFT warm start inside the job, then GRPO through ``examples/agents/calculator_agent.py`` and
the endpoint, held-out greedy success through the same agent before and after (n = 200). Writes
``experiments/results/agent_main_job/{results.json,table.md}`` and ``docs/agent_main_job.png``: success before and
after per seed, the training success per step, peak RSS and job time, and what the agent did (tools per kind).

    python experiments/agent_main_job.py                        # seeds 0 1 2, one after the other
    python experiments/agent_main_job.py --collect RUN_DIR ...  # only the table and plot of finished runs
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "SmolLM2-135M-Instruct" / "grpo" / "config_tool_agent.yaml"
RESULTS = ROOT / "experiments" / "results" / "agent_main_job"
PLOT = ROOT / "docs" / "agent_main_job.png"


def run(seed: int, out: Path) -> Path:
    """One seed, as a person runs it. Beside its summary (``job.json``): the job's own peak RSS (``wait4``: this
    child and what it waited for, not earlier seeds), its wall time, and an RSS timeline sampled every second
    (``[seconds since start, GB]``) to place the peak against the job's log (``job.log``, timestamped lines)."""
    cmd = [sys.executable, "-m", "grouprl.cli", "train", "--config", str(RECIPE), "--seed", str(seed)]
    cmd += ["--output_dir", str(out), "--overwrite_output_dir", "true"]
    out.mkdir(parents=True, exist_ok=True)
    log = (out.parent / f"{out.name}.log").open("w")
    start, started = time.perf_counter(), time.time()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    timeline: list[list[float]] = []
    sampler = threading.Thread(target=sample_rss, args=(proc, start, timeline), daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    log.close()
    if proc.returncode:
        raise SystemExit(f"seed {seed} failed (exit {proc.returncode}); its log: {log.name}")
    (out / "job.json").write_text(
        json.dumps({"peak_rss_gb": usage.ru_maxrss / 2**20, "wall_s": time.perf_counter() - start, "started": started, "rss": timeline})
    )
    return out


def sample_rss(proc: subprocess.Popen, start: float, timeline: list[list[float]]) -> None:
    """The job's resident memory once a second, while it runs."""
    status = Path(f"/proc/{proc.pid}/status")
    while proc.returncode is None:
        try:
            kb = next(int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("VmRSS"))
        except (OSError, StopIteration):
            return
        timeline.append([round(time.perf_counter() - start, 1), round(kb / 2**20, 2)])
        time.sleep(1.0)


def tools_by_kind(path: Path) -> dict[str, dict[str, int]]:
    """Per question kind: episodes solved, and how many began with each tool."""
    kinds: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in path.read_text().splitlines():
        r = json.loads(line)
        kind = "multiply" if r["question"].startswith("What is") else "convert"
        calls = [m["tool_calls"][0] for m in r["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
        first = (calls[0].get("name") or calls[0].get("function", {}).get("name")) if calls else "none"
        kinds[kind].update({"n": 1, "solved": int(bool(r["correct"])), f"first_call_{first}": 1})
    return {k: dict(v) for k, v in sorted(kinds.items())}


def collect(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    job = json.loads((run_dir / "job.json").read_text()) if (run_dir / "job.json").is_file() else {}
    return {
        "seed": config["train"]["seed"],
        "before": summary["accuracy_before"],
        "after": summary["accuracy_after"],
        "n_eval": summary["n_eval"],
        "wall_seconds": summary.get("wall_seconds"),
        "peak_rss_gb": job.get("peak_rss_gb"),
        "train_success": [s["success_rate"] for s in steps],
        "skipped_steps": [s["step"] for s in steps if s.get("update_time", 1) < 0.01],
        "before_by_kind": tools_by_kind(run_dir / "eval" / "before.jsonl"),
        "after_by_kind": tools_by_kind(run_dir / "eval" / "after.jsonl"),
    }


def table(results: list[dict]) -> str:
    rows = ["| seed | before | after | gain | multiply solved | convert solved | job time | peak RSS |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        mul, conv = r["after_by_kind"]["multiply"], r["after_by_kind"]["convert"]
        rss = f"{r['peak_rss_gb']:.1f} GB" if r["peak_rss_gb"] else "—"
        rows.append(
            f"| {r['seed']} | {r['before']:.1%} | {r['after']:.1%} | {r['after'] - r['before']:+.1%} | "
            f"{mul.get('solved', 0)}/{mul['n']} | {conv.get('solved', 0)}/{conv['n']} | {r['wall_seconds']:.0f} s | {rss} |"
        )
    return "\n".join(rows) + "\n"


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    for i, r in enumerate(results):
        left.bar([i - 0.2, i + 0.2], [r["before"], r["after"]], width=0.4, color=["grey", "tab:blue"])
        right.plot(range(1, len(r["train_success"]) + 1), r["train_success"], marker="o", label=f"seed {r['seed']}")
    left.set(xticks=range(len(results)), xticklabels=[f"seed {r['seed']}" for r in results], ylim=(0, 1),
             ylabel="held-out success (n=200, greedy)", title="before (grey) and after RL")
    right.set(xlabel="GRPO step", ylabel="sampled success (32 episodes)", ylim=(0, 1), title="training")
    right.legend()
    fig.suptitle("SmolLM2-135M-Instruct through the example openai-SDK agent")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--work", default=str(ROOT / "outputs" / "agent_main_job"))
    parser.add_argument("--collect", nargs="*", help="finished run folders: only their table and plot")
    args = parser.parse_args(argv)
    dirs = [Path(d) for d in args.collect] if args.collect else [
        run(seed, Path(args.work) / f"seed{seed}") for seed in args.seeds
    ]
    results = [collect(d) for d in dirs]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "results.json").write_text(json.dumps(results, indent=2))
    (RESULTS / "table.md").write_text(table(results))
    plot(results, PLOT)
    print(table(results))
    return results


if __name__ == "__main__":
    main()
