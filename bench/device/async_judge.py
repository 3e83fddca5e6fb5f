"""The GPU check's asynchronous-rollouts part (``async_judge``): sync vs async step throughput where latency is real.

Issue 29's figure on the hardware it asked for: the main job's work (2 prompts x 8 completions, 12 new tokens)
on SmolLM2-135M's architecture, scored by an LLM judge over a real OpenAI-compatible server on 127.0.0.1
answering in 0.5 s (``bench/common/judge_standin.py``), ``grouprl train`` run twice from the same model and seed:
``--rollout_mode sync``, then ``async`` (``max_staleness 1``, ``max_inflight 2``). On 2 CPU cores the
generator and the learner share the same cores, which bounded async at 1.21x (docs/async.md); on a GPU
machine generation is bound by one host thread's kernel launches, and the producers and the learner each
have host cores of their own.

The weights are random (SmolLM2's 270 MB of bf16 cannot travel in the 64 MiB a device call carries): every
completion runs to the 12-token cap and the judge scores it 0, so the runs set
``skip_zero_advantage_updates: false`` and every step still makes its full update. The tokenizer is
grouprl's character tokenizer over the task's text (SmolLM2's 49,152-row embedding and head are kept).
Throughput: steps per second of the learner over the steps after the first (``bench.rollouts.async_rollouts.throughput``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from bench.common.judge_standin import standin
from bench.device.models import built_once, random_weights
from bench.rollouts import async_rollouts

SMOLLM2_135M = dict(
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    vocab_size=49152,
    max_position_embeddings=8192,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)
FAST_SMOLLM2 = dict(
    SMOLLM2_135M,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=4096,
)
# steps per run, the judge's seconds per answer, torch threads per run (the GPU host has 16 cores)
SETTINGS = dict(steps=8, judge_delay=0.5, threads=4)
FAST_SETTINGS = dict(steps=3, judge_delay=0.2, threads=1)


def smollm2_shape(spec: dict, recipe: Path) -> str:
    """SmolLM2-135M's architecture with random weights (seed 0) in spec["dtype"], saved under spec["work"]."""

    def build(folder: Path) -> None:
        from transformers import LlamaConfig, LlamaForCausalLM

        from grouprl.run_config import build_config
        from grouprl.tasks import load_task

        task = load_task(build_config(recipe, {"output_dir": str(Path(spec["work"]) / "task_async")}, environ={}))
        corpus = task.tokenizer_corpus() + (task.system_prompt or "")
        dims = FAST_SMOLLM2 if spec["fast"] else SMOLLM2_135M
        random_weights(spec, folder, corpus, LlamaConfig, LlamaForCausalLM, dims)

    return built_once(spec, "smollm2_shape", build)


def part_async_judge(spec: dict, report) -> dict:
    settings = FAST_SETTINGS if spec["fast"] else SETTINGS
    work = Path(spec["work"]) / "async_judge"
    work.mkdir(parents=True, exist_ok=True)
    # the runs' and the judge's logs beside the check's JSON (the work folder is removed at the end; a failed run's
    # traceback must come back); the judge in this worker's process group, so a part killed at its cap kills it too
    log = Path(spec["out"]) / "async_judge_runs.log"
    judge = standin(
        Path(spec["out"]) / "async_judge_server.log", mode="digits", delay=settings["judge_delay"], new_session=False
    )
    judge.start()
    try:
        timeout = max(20.0, 4 * 16 * settings["judge_delay"])  # two producers' 16 requests queued at the server
        recipe = work / "judge.json"
        recipe.write_text(json.dumps(async_rollouts.smollm2_judge_recipe(judge.base_url, timeout)))
        model = smollm2_shape(spec, recipe)
        common = [
            "--config",
            str(recipe),
            "--model_name_or_path",
            model,
            "--max_steps",
            str(settings["steps"]),
            "--torch_dtype",
            spec["dtype"],
            "--skip_zero_advantage_updates",
            "false",
        ]
        result: dict = {
            "model": "SmolLM2-135M architecture, random weights",
            **settings,
            "load_before": os.getloadavg(),
            "judge_pid": judge.proc.pid if judge.proc else None,
        }
        report(result)
        runs = {"sync": [], "async": ["--rollout_mode", "async", "--max_staleness", "1", "--max_inflight", "2"]}
        for mode, extra in runs.items():
            start = time.perf_counter()
            rows = async_rollouts.train(work / mode, [*common, *extra], log, settings["threads"], spec["device"])
            result[mode] = summarize(rows)
            result[mode]["run_s"] = time.perf_counter() - start
            report(result)
        result["ratio_async_over_sync"] = result["async"]["steps_per_s"] / result["sync"]["steps_per_s"]
        result["load_after"] = os.getloadavg()
        return result
    finally:
        judge.kill()


def summarize(rows: list[dict]) -> dict:
    """Steps per second after the first step, the phase means over the same steps, and how many updates ran."""
    return {
        "steps": len(rows),
        "steps_per_s": async_rollouts.throughput(rows),
        "means": async_rollouts.phase_means(rows),
        "updates_skipped": int(sum(r.get("skipped_zero_advantage", 0.0) for r in rows)),
    }
