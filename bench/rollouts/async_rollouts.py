"""Asynchronous rollouts where latency is real: ``async`` vs ``sync`` step throughput at the same batch, in one run.

Two latency-bound workloads, on the tiny model (``--base tiny``, the default) or on SmolLM2-135M-Instruct
(``--base smollm2``), CPU:

- **tool**: the tool recipe (``recipes/tiny/tool_arithmetic.yaml``: GiGPO over tool-calling conversations)
  whose ``calculator`` is a real HTTP service on 127.0.0.1 answering in 0.3 s (this file, ``--serve-tool``,
  in its own process; the tool the model calls is a user tool file that requests it);
- **judge**: 2-digit addition scored by an LLM judge over a real OpenAI-compatible server answering in
  0.5 s (``bench/common/judge_standin.py --delay 0.5``), many requests at once; ``--judge-delay`` sets its seconds
  per answer and ``--judge-concurrency 1`` serves one request at a time (the others queue at the server),
  the workload then named ``judge_<delay>s_c<concurrency>``.

and one compute-bound one, ``main``: the main job (``grouprl train``: SmolLM2, 2-digit addition, 2 prompts x
8 completions) with no latency at all, on the HF backend or, with ``--backend vllm`` (run this file with
``.venv-vllm``'s python), vLLM's CPU build colocated.

On SmolLM2 the tool recipe starts from a short tool SFT (``--tool-sft-steps``, ``job/tool_sft.py``):
untrained, SmolLM2-135M-Instruct never calls a tool through the template it is given
(``experiments/tool_smollm2.py``), and the bench would then time generation alone, not the tool's wait.
The tool's calls per episode are in the results (``tools/calls_per_episode``): the latency a step
actually waited is that times the episodes times 0.3 s.

Each workload runs ``sync`` first (its tiny model warm-started by the run's short SFT), then ``async``
(``max_staleness 1``, ``max_inflight 2``) from that run's warm model (the weights sync started from), same
batch and seed. Throughput is
steps per second of the learner: 1 / mean ``step_time`` over the steps after the first (the first
step's producer starts cold). The machine's load average is printed before and after each run.
Writes ``bench/rollouts/results/async_rollouts.json`` (tiny) or ``async_rollouts_smollm2.json``.

    python -m bench.rollouts.async_rollouts --steps 6
    python -m bench.rollouts.async_rollouts --base smollm2 --steps 5
    python -m bench.rollouts.async_rollouts --base smollm2 --only judge --judge-concurrency 1 --steps 4
    .venv-vllm/bin/python -m bench.rollouts.async_rollouts --base smollm2 --only main --backend vllm
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.common import ROOT, child_pythonpath
from bench.common.judge_standin import ServedProcess, free_port, standin

TOOL_FILE = '''
import json, urllib.parse, urllib.request

def calculator(expression: str) -> str:
    """Evaluate arithmetic exactly.

    Args:
        expression: e.g. "4821 * 97"
    """
    url = "http://127.0.0.1:{port}/calc?" + urllib.parse.urlencode({{"expression": expression}})
    with urllib.request.urlopen(url, timeout=10) as reply:
        body = json.loads(reply.read())
    if "error" in body:
        raise ValueError(body["error"])
    return body["value"]
'''


class ToolHandler(BaseHTTPRequestHandler):
    delay = 0.3

    def log_message(self, *args):
        pass

    def do_GET(self):
        from grouprl.tools.builtin import calculator

        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        time.sleep(self.delay if self.path.startswith("/calc") else 0.0)
        try:
            body = {"value": calculator(query.get("expression", [""])[0])} if self.path.startswith("/calc") else {}
        except ValueError as err:
            body = {"error": str(err)}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def load() -> str:
    return "load average %.2f %.2f %.2f (%d cores)" % (*os.getloadavg(), os.cpu_count() or 0)


def train(out: Path, args: list[str], log: Path, threads: int | None = None, device: str = "cpu") -> list[dict]:
    """One ``grouprl train`` run in its own process; its metrics rows. ``device``: cpu here, cuda in the GPU check
    (bench/device/async_judge.py); PYTHONPATH keeps what the caller had (a GPU image's carried wheels)."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads or THREADS),
        "PYTHONPATH": child_pythonpath(),
        "HF_HUB_OFFLINE": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "grouprl.cli",
        "train",
        "--output_dir",
        str(out),
        "--n_eval",
        "0",
        "--device",
        device,
        "--seed",
        "3",
        *args,
    ]
    print(f"  {load()}", flush=True)
    start = time.perf_counter()
    with log.open("ab") as fh:
        code = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise SystemExit(f"run {out} failed (exit {code}); see {log}")
    print(f"  done in {time.perf_counter() - start:.0f} s; {load()}", flush=True)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def throughput(metrics: list[dict]) -> float:
    times = [m["step_time"] for m in metrics[1:]] or [metrics[0]["step_time"]]
    return len(times) / sum(times)


PHASE_KEYS = (
    "step_time",
    "rollout_wait_time",
    "generation_time",
    "score_time",
    "update_time",
    "tools/calls_per_episode",
    "async/staleness_mean",
    "async/weight_sync_time",
    "async/producer_weight_install_time",
    "async/producer_generation_time",
    "async/producer_score_time",
    "reward",
)


def phase_means(metrics: list[dict]) -> dict:
    """Each of ``PHASE_KEYS`` the run logged, its mean over the same steps as ``throughput``."""
    later = metrics[1:] or metrics
    return {k: sum(r.get(k, 0.0) for r in later) / len(later) for k in PHASE_KEYS if k in metrics[-1]}


def workload(name: str, work: Path, common: list[str], log: Path) -> dict:
    load_before = os.getloadavg()
    print(f"{name}: sync ({SYNC_THREADS} threads)", flush=True)
    sync = train(work / f"{name}_sync", common, log, SYNC_THREADS)
    warm = work / f"{name}_sync" / "sft_model"
    model = ["--model_name_or_path", str(warm)] if warm.is_dir() else []
    print(f"{name}: async ({THREADS} threads)", flush=True)
    asynchronous = train(
        work / f"{name}_async",
        [*common, *model, "--rollout_mode", "async", "--max_staleness", "1", "--max_inflight", "2"],
        log,
    )
    result = {
        "sync_steps_per_s": throughput(sync),
        "async_steps_per_s": throughput(asynchronous),
        "sync": phase_means(sync),
        "async": phase_means(asynchronous),
    }
    result["ratio"] = result["async_steps_per_s"] / result["sync_steps_per_s"]
    result["sync_threads"], result["async_threads"] = SYNC_THREADS, THREADS
    result["load_before"], result["load_after"] = load_before, os.getloadavg()
    print(f"{name}: async / sync step throughput = {result['ratio']:.2f}x  ({json.dumps(result)})", flush=True)
    return result


SYNC_THREADS = 1  # --sync-threads: the sync run's torch threads (default THREADS), e.g. sync's best (2) vs async's (1)
THREADS = 1  # torch threads of every run (--threads): one a thread, so two producers and the learner share
SMOLLM2 = Path.home() / ".cache" / "grouprl" / "models" / "smollm2-135m-instruct"
VLLM = ["--generation_backend", "vllm", "--vllm_sleep_during_update", "false", "--vllm_max_model_len", "512"]


def judge_reward(base_url: str, timeout: float = 20.0) -> dict:
    return {
        "name": "judge",
        "options": {"base_url": base_url, "model": "grader", "concurrency": 16, "timeout": timeout, "retries": 1},
    }


def smollm2_judge_recipe(base_url: str, timeout: float = 20.0) -> dict:
    """The main job's recipe (2 prompts x 8 completions of SmolLM2), scored by the judge alone."""
    import yaml

    recipe = yaml.safe_load((ROOT / "recipes/SmolLM2-135M-Instruct/grpo/config_arithmetic.yaml").read_text())
    keep = {k: v for k, v in recipe.items() if k not in ("output_dir", "n_eval")}
    return {**keep, "rewards": [judge_reward(base_url, timeout)]}


def smollm2_tool_model(recipe: Path, out: Path, steps: int) -> str:
    """SmolLM2 after ``steps`` steps of the tool SFT on expert conversations, so that it calls the tool."""
    from grouprl.job.tool_sft import tool_sft
    from grouprl.rollout.runner import episode_settings
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task

    cfg = build_config(recipe, {"device": "cpu", "num_threads": 1, "seed": 0, "output_dir": str(out / "sft")})
    task = load_task(cfg)
    start = time.perf_counter()
    path = tool_sft(
        str(SMOLLM2), task, episode_settings(cfg, task), out / "smollm2_tool_sft", steps, 3e-5, 4, 0, n_episodes=64
    )
    print(f"tool SFT of SmolLM2: {steps} steps in {time.perf_counter() - start:.0f} s; {load()}", flush=True)
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--base", choices=["tiny", "smollm2"], default="tiny")
    parser.add_argument("--only", choices=["tool", "judge", "main"], default=None)
    parser.add_argument("--backend", choices=["hf", "vllm"], default="hf", help="the main workload's backend")
    parser.add_argument("--tool-model", default=None, help="a warm tool model (a run's sft_model): no SFT here")
    parser.add_argument("--tool-sft-steps", type=int, default=16, help="smollm2: the tool SFT before the tool runs")
    parser.add_argument("--judge-model", default=None, help="a warm arithmetic model (a run's sft_model)")
    parser.add_argument("--judge-delay", type=float, default=0.5, help="the judge server's seconds per answer")
    parser.add_argument(
        "--judge-concurrency",
        type=int,
        default=0,
        help="requests the judge server answers at a time (0: no limit; 1: one at a time)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="OMP_NUM_THREADS of the runs (sync with 2 threads "
        "is the fair baseline on 2 cores: async's threads then oversubscribe them)",
    )
    parser.add_argument(
        "--sync-threads",
        type=int,
        default=0,
        help="the sync run's OMP_NUM_THREADS (0: --threads): "
        "--sync-threads 2 --threads 1 puts sync's best setting on 2 cores against async's",
    )
    parser.add_argument(
        "--tool-args",
        default="",
        help="extra `grouprl train` arguments for the tool runs, e.g. "
        "'--gradient_accumulation_steps 4 --learning_rate 1e-5' for SmolLM2",
    )
    parser.add_argument(
        "--out", default=None, help="the results file (default: bench/rollouts/results/async_rollouts*.json)"
    )
    parser.add_argument("--serve-tool", type=int, default=None, help=argparse.SUPPRESS)  # the tool's process
    args = parser.parse_args()
    global THREADS, SYNC_THREADS
    THREADS, SYNC_THREADS = args.threads, args.sync_threads or args.threads
    if args.serve_tool is not None:
        ThreadingHTTPServer(("127.0.0.1", args.serve_tool), ToolHandler).serve_forever()
        return
    work = Path(tempfile.mkdtemp(prefix="async_bench_"))
    log = work / "runs.log"
    smollm2 = args.base == "smollm2"
    print(
        f"bench/rollouts/async_rollouts.py: {args.base}, {args.steps} steps per run, work dir {work}; {load()}",
        flush=True,
    )
    results: dict = {"steps": args.steps, "load_before": os.getloadavg()}
    out = (
        Path(__file__).resolve().parent
        / "results"
        / ("async_rollouts_smollm2.json" if smollm2 else "async_rollouts.json")
    )
    out = Path(args.out) if args.out else out
    kept = json.loads(out.read_text()) if out.is_file() and args.only else {}  # --only: the other workload stays

    def save() -> None:  # after each workload: a bench cut short keeps what it measured
        out.write_text(json.dumps({**kept, **results, "load_after": os.getloadavg()}, indent=1) + "\n")

    if args.only in (None, "judge"):
        judge = standin(work / "judge.log", mode="digits", delay=args.judge_delay, concurrency=args.judge_concurrency)
        judge.start()
        # the client's time budget: a queue of 2 producers' 16 requests each at the server must not time out
        timeout = max(20.0, 4 * 16 * args.judge_delay)
        name = (
            "judge"
            if (args.judge_delay, args.judge_concurrency) == (0.5, 0)
            else f"judge_{args.judge_delay:g}s_c{args.judge_concurrency}"
        )
        try:
            recipe = work / "judge.yaml"
            if smollm2:
                recipe.write_text(json.dumps(smollm2_judge_recipe(judge.base_url, timeout)))
                common = ["--config", str(recipe), "--max_steps", str(args.steps)]
            else:
                recipe.write_text(json.dumps({"rewards": [judge_reward(judge.base_url, timeout)]}))
                common = [
                    "--config",
                    str(recipe),
                    "--max_steps",
                    str(args.steps),
                    "--batch_size",
                    "4",
                    "--num_generations",
                    "4",
                    "--n_train",
                    "200",
                    "--sft_steps",
                    "150",
                ]
            common += ["--model_name_or_path", args.judge_model] if args.judge_model else []
            results[name] = workload(name, work, common, log)
            save()
        finally:
            judge.kill()
    if args.only in (None, "tool"):
        port = free_port()
        tool = ServedProcess(
            [sys.executable, "-m", "bench.rollouts.async_rollouts", "--serve-tool", str(port)],
            work / "tool.log",
            port,
            health="/health",
            startup_s=30,
            env={"PYTHONPATH": child_pythonpath()},
        )
        tool.start()
        try:
            tool_file = work / "http_tools.py"
            tool_file.write_text(TOOL_FILE.format(port=port))
            import yaml

            recipe = yaml.safe_load((ROOT / "recipes/tiny/tool_arithmetic.yaml").read_text())
            recipe["tools"]["tools"] = [f"{tool_file}:calculator", "lookup"]  # the HTTP-backed calculator
            (work / "tool.yaml").write_text(yaml.safe_dump(recipe))
            common = [
                "--config",
                str(work / "tool.yaml"),
                "--max_steps",
                str(args.steps),
                "--sft_steps",
                "200",
                "--sft_target_accuracy",
                "0.05",
            ]
            if smollm2 and not args.tool_model:
                args.tool_model = smollm2_tool_model(work / "tool.yaml", work, args.tool_sft_steps)
            common += ["--model_name_or_path", args.tool_model] if args.tool_model else []
            common += args.tool_args.split()
            results["tool"] = workload("tool", work, common, log)
            save()
        finally:
            tool.kill()
    if args.only == "main" or (args.only is None and smollm2):
        name = f"main_{args.backend}"
        results[name] = workload(
            name, work, ["--max_steps", str(args.steps), *(VLLM if args.backend == "vllm" else [])], log
        )
    save()
    print(f"wrote {out}; {load()}")


if __name__ == "__main__":
    main()
