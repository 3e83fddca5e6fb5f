"""An agent the user wrote, served from the vLLM backend: ``grouprl train --agent`` with
``generation_backend: vllm``. The endpoint batches the agent's calls into the engine, each call's token ids
and the engine's log-probs become the training sample, and the update's ratio against the engine's
log-probs is ~1 (fp32 engine and trainer, same weights): the engine's ids and log-probs reached the loss
unchanged. Skipped where vLLM is not installed; CI runs it in the vllm venv (``.ci/vllm-venv``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM not installed (pip install grouprl[vllm]; CI: .ci/vllm-venv)")

from grouprl.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "tiny" / "tool_arithmetic_agent.yaml"
CALCULATOR = f"{ROOT / 'examples' / 'agents' / 'calculator_agent.py'}:run"


def test_the_example_agent_trains_on_vllm(tmp_path):
    from grouprl.models.tiny import init_tiny
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task

    task = load_task(build_config(RECIPE, {}, environ={}))
    tiny = init_tiny(
        task.tokenizer_corpus(),
        tmp_path / "tiny",
        hidden=128,
        layers=2,
        heads=4,
        seed=0,
        tokenizer=task.tiny_tokenizer,
        max_positions=task.tiny_max_positions,
    )  # head_dim 32 for vLLM
    out = tmp_path / "run"
    # untrained, every reward is 0: the update must still run (skip off) for its ratio to be measured
    args = (
        f"train --config {RECIPE} --model_name_or_path {tiny} --output_dir {out} --agent {CALCULATOR} "
        "--generation_backend vllm --torch_dtype float32 --vllm_max_model_len 2048 --max_steps 2 --batch_size 2 "
        "--num_generations 2 --max_new_tokens 24 --n_eval 0 --seed 3 --device cpu --logging_steps 1 "
        "--save_trajectories_every 1 --learning_rate 1e-3 --skip_zero_advantage_updates false"
    )
    assert main(args.split()) == 0
    metrics = {m["step"]: m for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}
    assert sorted(metrics) == [1, 2]
    for m in metrics.values():
        assert m["agent/calls_per_episode"] >= 1 and m["agent/failed_episodes"] == 0 and m["samples"] == 4
        # the loss's ratio against the engine's recorded log-probs: the same fp32 weights on both sides
        assert 0.99 < m["importance_sampling/ratio_mean"] < 1.01, m
    rollouts = [json.loads(line) for line in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 8 and all(r["agent"]["calls"] >= 1 and r["agent"]["failure"] is None for r in rollouts)
