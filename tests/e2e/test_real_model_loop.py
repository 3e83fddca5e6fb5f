"""The whole loop on a real pretrained model (SmolLM2-135M-Instruct: 49k-token BPE vocabulary, ChatML
template), HF backend: 2 GRPO steps with and without LoRA (llama's module names), a checkpoint, a resumed
third step, and ``grouprl eval`` of the result. Kept short (4-token completions, 2 prompts x 4 samples);
the vLLM twin is tests/e2e/test_vllm_real_model.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open

from grouprl.cli import main
from real_model import smollm2_dir  # noqa: F401 - the session fixture

LLAMA_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def real_model_run(model: Path, out: Path, *extra: str) -> int:
    """2 prompts x 4 samples of at most 6 tokens; ``length`` (characters) gives the group a spread to learn from."""
    return main(
        [
            "train",
            "--task",
            "arithmetic",
            "--model_name_or_path",
            str(model),
            "--output_dir",
            str(out),
            "--max_steps",
            "2",
            "--batch_size",
            "2",
            "--num_generations",
            "4",
            "--max_new_tokens",
            "6",
            "--n_eval",
            "2",
            "--n_train",
            "8",
            "--device",
            "cpu",
            "--seed",
            "0",
            "--rewards",
            "length",
            "--learning_rate",
            "1e-5",
            "--lr_scheduler_type",
            "constant",
            "--logging_steps",
            "1",
            "--system_prompt",
            "Reply with only the number.",
            *extra,
        ]
    )


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def tensor(folder: Path, name: str):
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return f.get_tensor(name)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_two_steps_checkpoint_resume_and_eval(smollm2_dir, tmp_path, lora):
    out = tmp_path / "run"
    peft = (
        [
            "--use_peft",
            "true",
            "--lora_r",
            "4",
            "--lora_alpha",
            "8",
            "--lora_dropout",
            "0",
            "--lora_target_modules",
            *LLAMA_MODULES,
        ]
        if lora
        else []
    )
    assert real_model_run(smollm2_dir, out, *peft) == 0
    steps = metrics(out)
    assert [m["step"] for m in steps if "loss" in m] == [1, 2]
    assert any(m["grad_norm"] > 0 for m in steps if "grad_norm" in m), "no gradient reached the weights"
    rollout = json.loads((out / "rollouts" / "rollouts.jsonl").read_text().splitlines()[0])
    assert rollout["prompt"].startswith("<|im_start|>system\nReply with only the number.<|im_end|>\n")
    ckpt = out / "checkpoint-2"
    if lora:
        config = json.loads((ckpt / "adapter_config.json").read_text())
        assert set(config["target_modules"]) == set(LLAMA_MODULES)
        assert not (ckpt / "model.safetensors").exists()
    else:  # full fine-tuning moved the real weights
        name = "model.layers.0.self_attn.q_proj.weight"
        assert not tensor(ckpt, name).equal(tensor(smollm2_dir, name))
    assert (ckpt / "chat_template.jinja").is_file() or "chat_template" in (ckpt / "tokenizer_config.json").read_text()

    assert real_model_run(smollm2_dir, out, *peft, "--max_steps", "3", "--resume_from_checkpoint", "last") == 0
    assert [m["step"] for m in metrics(out) if "loss" in m] == [1, 2, 3]
    assert (out / "checkpoint-3").is_dir()

    report = tmp_path / "eval.jsonl"
    assert (
        main(
            [
                "eval",
                "--model",
                str(out / "checkpoint-3"),
                "--task",
                "arithmetic",
                "--n",
                "2",
                "--max_new_tokens",
                "4",
                "--device",
                "cpu",
                "--out",
                str(report),
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    assert len(rows) == 2 and all(r["question"] and r["completion"] for r in rows)
