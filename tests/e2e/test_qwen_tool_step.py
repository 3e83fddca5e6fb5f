"""One GRPO step of the tool recipe on a real tool-calling model (Qwen2.5-Coder-0.5B-Instruct, LoRA, HF
backend): 1 prompt x 2 conversations through the model's own chat template, the bare-JSON and tagged calls
counted apart, an update, a checkpoint. Not ``slow``: CI runs it (about 2.5 minutes on 2 loaded cores, the
model materialised once per machine by the fixture); longer runs of the recipe are."""

from __future__ import annotations

import json
from pathlib import Path

from grouprl.cli import main
from real_model import qwen_coder_dir  # noqa: F401 - the session fixture

RECIPE = (
    Path(__file__).resolve().parents[2]
    / "recipes"
    / "Qwen2.5-Coder-0.5B-Instruct"
    / "grpo"
    / "config_tool_arithmetic.yaml"
)


def test_one_grpo_step_of_a_tool_conversation_on_qwen_coder(qwen_coder_dir, tmp_path):
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--config",
                str(RECIPE),
                "--model_name_or_path",
                str(qwen_coder_dir),
                "--output_dir",
                str(out),
                "--max_steps",
                "1",
                "--batch_size",
                "1",
                "--num_generations",
                "2",
                "--max_new_tokens",
                "32",
                "--max_tool_calls",
                "1",
                "--n_eval",
                "0",
                "--seed",
                "0",
                "--device",
                "cpu",
                "--save_trajectories_every",
                "1",
            ]
        )
        == 0
    )
    [metrics] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics["samples"] == 2 and metrics["update_time"] > 0
    episodes = [json.loads(line) for line in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()]
    # the model's own template (its tools section, not grouprl's fallback) rendered the first prompt
    assert len(episodes) == 2 and all(
        "You are provided with function signatures within <tools></tools> XML tags" in e["prompt"] for e in episodes
    )
    steps = [json.loads(line) for line in (out / "trajectories" / "step_000001.jsonl").read_text().splitlines()]
    assert steps and all(s["action"].strip() for s in steps)
    forms = [c["form"] for s in steps for c in s["tool_calls"]]
    assert set(forms) <= {"tagged", "bare_json"}
    assert metrics["tools/calls_bare_json"] * 2 == forms.count("bare_json")
    assert metrics["tools/calls_tagged"] * 2 == forms.count("tagged")
    assert (out / "checkpoint-1" / "adapter_model.safetensors").is_file()  # LoRA: the adapters, not 2.5 GB
