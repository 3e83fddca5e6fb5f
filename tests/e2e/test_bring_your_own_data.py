"""The "done means" test: a task no built-in knows trains from an open-r1-style recipe, no code change.

The acronym task (examples/acronyms: a phrase in, its acronym out) comes with a reward file in
TRL's signature that reads the dataset's ``acronym`` and ``words`` columns. An open-r1-shaped
recipe names them; ``grouprl init-model --config`` builds the tiny model's tokenizer from the
dataset, and ``grouprl train --config`` trains offline on the CPU, evaluating every
``eval_steps``, rotating checkpoints, recording the best and pushing every checkpoint to its hub
revision. The hub cannot be reached from here: the pushes go, through the real huggingface_hub
client, to a local HTTP stand-in of the endpoints used (tests/hub_standin.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO_ROOT
from hub_standin import serve

EXAMPLE = REPO_ROOT / "examples" / "acronyms"
GROUPRL = [sys.executable, "-m", "grouprl.cli"]


def recipe(tmp_path: Path, data: Path, model: Path | None, **over) -> Path:
    """An open-r1-style recipe (flat TRL/open-r1 keys) for the acronym task."""
    keys = {
        "model_name_or_path": str(model) if model else None,
        "dataset_name": str(data),
        "dataset_prompt_column": "phrase",
        "dataset_test_split": "test",
        "system_prompt": "Answer with the acronym only.",
        "reward_funcs": [
            f"{EXAMPLE / 'acronym_rewards.py'}:acronym_exact",
            f"{EXAMPLE / 'acronym_rewards.py'}:acronym_letters",
        ],
        "reward_weights": [1.0, 1.0],
        "num_generations": 4,
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 1,
        "max_completion_length": 6,
        "learning_rate": 1.0e-3,
        "lr_scheduler_type": "constant",
        "warmup_ratio": 0.0,
        "max_steps": 4,
        "beta": 0.0,
        "temperature": 1.0,
        "eval_strategy": "steps",
        "eval_steps": 2,
        "max_eval_samples": 8,
        "num_generations_eval": 2,
        "save_strategy": "steps",
        "save_steps": 1,
        "save_total_limit": 1,
        "logging_steps": 1,
        "seed": 0,
        "output_dir": str(tmp_path / "run"),
        "report_to": ["none"],
        "log_level": "info",
        "logging_strategy": "steps",
    }
    keys.update(over)
    path = tmp_path / "config_acronyms.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in keys.items() if v is not None}))
    return path


@pytest.fixture(scope="module")
def acronyms(tmp_path_factory) -> Path:
    sys.path.insert(0, str(EXAMPLE))
    try:
        import make_acronyms
    finally:
        sys.path.remove(str(EXAMPLE))
    return make_acronyms.write(tmp_path_factory.mktemp("acronyms") / "data", n_train=64, n_test=16)


def run(args: list[str], **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **env}
    return subprocess.run(GROUPRL + args, capture_output=True, text=True, timeout=600, env=full_env)


def test_acronym_task_trains_from_an_openr1_recipe_offline(acronyms, tmp_path):
    from grouprl.models.loading import load_tokenizer

    model = tmp_path / "tiny"
    built = run(
        [
            "init-model",
            "--config",
            str(recipe(tmp_path, acronyms, None)),
            "--out",
            str(model),
            "--hidden_size",
            "32",
            "--num_layers",
            "1",
            "--num_heads",
            "4",
        ]
    )
    assert built.returncode == 0, built.stderr[-3000:]
    tokenizer = load_tokenizer(str(model))
    phrase = json.loads((acronyms / "train.jsonl").read_text().splitlines()[0])["phrase"]
    assert tokenizer.decode(tokenizer(phrase)["input_ids"]) == phrase  # the vocabulary covers the dataset

    server, hub = serve()
    try:
        trained = run(
            [
                "train",
                "--config",
                str(
                    recipe(
                        tmp_path,
                        acronyms,
                        model,
                        hub_model_id="me/acronyms",
                        hub_model_revision="v00",
                        push_to_hub_revision=True,
                        push_to_hub=True,
                    )
                ),
            ],
            LOGLEVEL="DEBUG",
            HF_ENDPOINT=f"http://127.0.0.1:{server.server_address[1]}",
            HF_TOKEN="hf_x",
            HF_HUB_OFFLINE="0",
        )  # the hub stand-in is the only endpoint: nothing leaves 127.0.0.1
    finally:
        server.shutdown()
    assert trained.returncode == 0, trained.stderr[-3000:]
    out = tmp_path / "run"
    # LOGLEVEL=DEBUG shows the filtering and which columns reach which reward.
    assert "64 rows kept, 0 dropped as bad" in trained.stderr
    assert "columns ['phrase', 'acronym', 'words']" in trained.stderr
    assert "acronym_letters (TRL signature) receives columns ['acronym', 'phrase', 'words']" in trained.stderr
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [m for m in metrics if "reward" in m]
    evals = [m for m in metrics if "eval/accuracy" in m]
    assert [m["step"] for m in train] == [1, 2, 3, 4]
    assert [m["step"] for m in evals] == [2, 4]
    for m in evals:
        assert {"eval/pass@2", "eval/completions/mean_length", "eval/reward", "eval/n_prompts"} <= set(m)
        assert any(k.startswith("eval/rewards/") and "acronym_letters" in k for k in m) and m["eval/n_prompts"] == 8.0
    rollouts = [json.loads(line) for line in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 4 * 2 * 4  # steps x prompts x generations
    for r in rollouts:  # the column-reading reward ran on every completion, without errors
        assert not r["reward_errors"]
        letters = next(v for k, v in r["rewards"].items() if k.endswith("acronym_letters"))
        assert letters is not None and letters <= 1.0
    # Rotation: save_total_limit 1 keeps the last checkpoint and the best one, nothing else.
    best = json.loads((out / "best_checkpoint.json").read_text())
    kept = sorted(p.name for p in out.glob("checkpoint-*"))
    assert kept == sorted({f"checkpoint-{best['step']}", "checkpoint-4"})
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best_checkpoint"]["step"] == best["step"] and summary["task"] == "prompt_dataset"
    # Every checkpoint went to its own revision (rotation waited for the uploads), the final model to main.
    branches = hub.repos["me/acronyms"]["branches"]
    assert set(branches) == {"main"} | {f"v00-step-{n:09d}" for n in (1, 2, 3, 4)}
    assert "model.safetensors" in branches["v00-step-000000003"][-1]["files"]
    assert "optimizer.pt" not in branches["v00-step-000000003"][-1]["files"]
    assert "model.safetensors" in branches["main"][-1]["files"]
    assert set(summary["hub_revisions"]) == set(branches)
    # grouprl eval with the same recipe evaluates on its task (no --task needed), and LOGLEVEL=DEBUG
    # shows grouprl's lines without other libraries' debug chatter.
    evaluated = run(
        [
            "eval",
            "--model",
            str(out / "checkpoint-4"),
            "--config",
            str(tmp_path / "config_acronyms.yaml"),
            "--n",
            "4",
            "--out",
            str(tmp_path / "eval.jsonl"),
        ],
        LOGLEVEL="DEBUG",
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert json.loads(evaluated.stdout)["n"] == 4 and len((tmp_path / "eval.jsonl").read_text().splitlines()) == 4
    assert "DEBUG grouprl." in evaluated.stderr
    assert not [
        line
        for line in evaluated.stderr.splitlines()
        if line.startswith("DEBUG ") and not line.startswith("DEBUG grouprl.")
    ]
