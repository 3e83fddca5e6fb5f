"""The agent evaluation with and without room in the decode loop's KV cache (``speed/kv_room.py``).

The held-out evaluation of the agent main job, exactly as ``grouprl eval`` runs it (the example ``openai``-SDK
agent, the endpoint, the turn cache, greedy): once as it ships, where each decode step writes its keys and values
into a buffer with room, and once with the room taken away, where transformers' ``DynamicLayer`` concatenates the
whole cache every step. Runs alternate (room first on even repeats); the completions must be the same (checked);
the figure is the median wall time of each. A model that loops until the agent's turns run out (seed 1's warm start)
makes long conversations, where the per-step copy weighs most. Writes ``bench/agents/results/kv_room.json``.

    python -m bench.agents.kv_room --model outputs/smollm2-tool-agent/sft_model --n 50 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

import grouprl.rollout.decode as decode_loop
from grouprl.cli import main as grouprl

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "SmolLM2-135M-Instruct" / "grpo" / "config_tool_agent.yaml"


def evaluate(model: str, n: int, batch_size: int, room: bool, out: Path) -> tuple[float, list]:
    shipped = decode_loop.reserve
    if not room:
        decode_loop.reserve = lambda cache, extra: 0  # transformers' DynamicLayer as it is: a cat per step
    try:
        start = time.perf_counter()
        code = grouprl(["eval", "--model", model, "--config", str(RECIPE), "--n", str(n),
                        "--batch_size", str(batch_size), "--out", str(out)])  # fmt: skip
        seconds = time.perf_counter() - start
    finally:
        decode_loop.reserve = shipped
    if code != 0:
        raise SystemExit(f"grouprl eval exited {code}")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return seconds, rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="a tool-warm model (the agent main job's sft_model)")
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--batch_size", type=int, default=50, help="agents in flight (the recipe's eval_batch_size)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"room": [], "cat": []}
    played: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for mode in ("room", "cat") if repeat % 2 == 0 else ("cat", "room"):
                seconds, played[mode] = evaluate(
                    args.model, args.n, args.batch_size, mode == "room", Path(tmp) / f"{mode}.jsonl"
                )
                times[mode].append(seconds)
    same = [a["completion"] for a in played["room"]] == [b["completion"] for b in played["cat"]]
    result = {
        "model": args.model,
        "episodes": args.n,
        "agents_in_flight": args.batch_size,
        "same_completions": same,
        "success_rate": sum(bool(r["correct"]) for r in played["room"]) / args.n,
        "model_calls": sum(r["agent"]["calls"] for r in played["room"]),
        "seconds_room": statistics.median(times["room"]),
        "seconds_cat": statistics.median(times["cat"]),
        "times": times,
        "torch_threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
    }
    result["speedup"] = result["seconds_cat"] / result["seconds_room"]
    out = Path(__file__).parent / "results" / "kv_room.json"
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    if not same:
        raise SystemExit("the completions differ with and without room")


if __name__ == "__main__":
    main()
