"""The vLLM backend on a real model (SmolLM2-135M-Instruct: GQA, tied 49k-token LM head, ChatML template), full
and LoRA on llama's module names: 2 GRPO steps whose sampling log-probs match the trainer's (pi_old/pi_sampler
~ 1), the engine then serving the updated weights; then a checkpoint, a resumed step and ``grouprl eval``
through the vLLM-backed CLI.

Skipped where vLLM is not installed; CI runs it in the venv made by ``.ci/vllm-venv``."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM not installed (pip install grouprl[vllm]; CI: .ci/vllm-venv)")

from real_model import smollm2_dir  # noqa: E402,F401 - the session fixture
from vllm_steps import TRAIN, two_steps_follow_the_trainer  # noqa: E402

from grouprl.cli import main  # noqa: E402
from grouprl.models.loading import load_policy  # noqa: E402
from grouprl.rollout.backends.vllm import VLLMBackend  # noqa: E402
from grouprl.run_config import build_config  # noqa: E402
from grouprl.tasks import load_task  # noqa: E402
from grouprl.train.trainer import Trainer  # noqa: E402

LLAMA_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
REAL = dict(
    TRAIN,
    learning_rate=1e-5,
    max_new_tokens=6,
    vllm_max_model_len=256,
    generation_backend="vllm",
    system_prompt="Reply with only the number.",
)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_two_steps_on_the_real_model_follow_the_trainer(smollm2_dir, tmp_path, lora):
    peft = dict(use_peft=True, lora_r=4, lora_alpha=8, lora_dropout=0.0, lora_target_modules=LLAMA_MODULES)
    cfg = build_config(None, dict(REAL, output_dir=str(tmp_path / "run"), **(peft if lora else {})), environ={})
    task = load_task(cfg)
    policy = load_policy(cfg.model, str(smollm2_dir), torch.device("cpu"), need_reference=False)
    trainer = Trainer(cfg, policy, task)
    assert isinstance(trainer.backend, VLLMBackend)
    assert trainer.backend.stops == [policy.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    two_steps_follow_the_trainer(trainer, policy)


def test_cli_run_checkpoints_resumes_and_evaluates(smollm2_dir, tmp_path, capsys):
    out = tmp_path / "run"
    run = [
        "train",
        "--task",
        "arithmetic",
        "--model_name_or_path",
        str(smollm2_dir),
        "--output_dir",
        str(out),
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
        "--generation_backend",
        "vllm",
        "--vllm_max_model_len",
        "256",
        "--torch_dtype",
        "float32",
    ]
    # A run that stops says why in one line on stderr: the assertion shows it (the log's tail may not).
    assert main([*run, "--max_steps", "2"]) == 0, capsys.readouterr().err[-1500:]
    assert main([*run, "--max_steps", "3", "--resume_from_checkpoint", "last"]) == 0, capsys.readouterr().err[-1500:]
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [s for s in steps if s] == [1, 2, 3]
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
    assert len(report.read_text().splitlines()) == 2
