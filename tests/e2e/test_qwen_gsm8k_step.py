"""The CPU GSM8K recipe on the real Qwen2.5-Coder-0.5B-Instruct, its first step: the seed's system prompt and
strict ``Final:`` reward on the local GSM8K copy (the hub's schema; the Hub itself cannot be reached here),
2 completions of one question, a LoRA update, before/after greedy on 2 test rows with the format rate beside
accuracy. Not ``slow``: CI runs it; the whole recipe (200 test rows, 12 steps) is docs/real_models.md's figure."""

from __future__ import annotations

import json
from pathlib import Path

from grouprl.cli import main
from grouprl.rewards.builtin.gsm8k import gsm8k_final
from grouprl.tasks.gsm8k import SYSTEM_PROMPT
from real_model import qwen_coder_dir  # noqa: F401 - the session fixture

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "Qwen2.5-Coder-0.5B-Instruct" / "grpo" / "config_gsm8k.yaml"


def test_first_step_of_the_gsm8k_recipe_on_qwen_coder(qwen_coder_dir, gsm8k_dir, tmp_path):
    out = tmp_path / "run"
    flags = {
        "--model_name_or_path": qwen_coder_dir,
        "--dataset_name_or_path": gsm8k_dir,
        "--output_dir": out,
        "--max_steps": 1,
        "--batch_size": 1,
        "--num_generations": 2,
        "--gradient_accumulation_steps": 1,
        "--max_new_tokens": 24,
        "--eval_max_new_tokens": 24,
        "--n_eval": 2,
        "--device": "cpu",
    }
    assert main(["train", "--config", str(RECIPE), *[str(x) for kv in flags.items() for x in kv]]) == 0
    [metrics] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics["samples"] == 2 and metrics["update_time"] > 0
    episodes = [json.loads(line) for line in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()]
    assert len(episodes) == 2 and all(SYSTEM_PROMPT in e["prompt"] for e in episodes)
    # each reply is scored by the seed's strict rule (untrained, the model often answers with a bare 'Final: N')
    assert all(e["reward"] == gsm8k_final(e["completion"], e["ground_truth"], strict=True) for e in episodes)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_eval"] == 2
    for phase in ("eval_before", "eval_after"):  # a right answer has the format: accuracy <= format rate
        assert summary[phase]["accuracy"] <= summary[phase]["format_rate"] <= 1.0
    assert (out / "checkpoint-1" / "adapter_model.safetensors").is_file()  # LoRA: the adapters alone
