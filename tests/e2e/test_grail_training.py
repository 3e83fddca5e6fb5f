"""GRAIL through the engine: every recipe for two steps on the synthetic data with tiny local models
(the hub models and datasets of the recipes cannot be downloaded here), the switches, the metrics,
the evaluation, and resume with the discriminator and the mixer restored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from grouprl.run_config import build_config
from grouprl.observe.jsonl import read_jsonl
from grouprl.models.tiny import build_tiny_model
from grouprl.models.tiny_words import build_tiny_classifier, build_word_tokenizer
from grouprl.tasks import load_task
from grouprl.tasks.slates.synthetic import write_dataset
from grouprl.job.run import run_training

ROOT = Path(__file__).resolve().parents[2]
QWEN = ROOT / "recipes" / "Qwen2.5-1.5B-Instruct" / "grpo"
RECIPES = [QWEN / f"config_{n}.yaml" for n in ("grpo_gun", "grpo_wage", "grail_gun", "grail_wage")]
TINY_RECIPE = ROOT / "recipes" / "tiny" / "slates_grail.yaml"
ISSUE_DIR = {"gun_control": "gun", "minimum_wage": "wage"}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """Synthetic rows in the hub schema, read back through the local-dir loader."""
    out = tmp_path_factory.mktemp("grail_data")
    write_dataset(out, ["gun_control", "minimum_wage"], 40, 8, seed=0, max_prior=2)
    return out


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory, data_dir) -> dict[str, Path]:
    """A tiny policy (word tokenizer over both issues' prompts, both system prompts) and a tiny discriminator."""
    root = tmp_path_factory.mktemp("grail_models")
    corpus = []
    for recipe in (RECIPES[0], RECIPES[1], TINY_RECIPE):
        issue = build_config(recipe, {}, environ={}).slates.slate_issue
        cfg = build_config(recipe, {"dataset_name_or_path": str(data_dir / ISSUE_DIR[issue])}, environ={})
        corpus.append(load_task(cfg).tokenizer_corpus())
    text = "\n".join(corpus)
    tok = build_word_tokenizer(text)
    torch.manual_seed(0)
    model = build_tiny_model(tok, hidden=32, layers=1, heads=4, max_positions=2048)
    model.save_pretrained(root / "policy")
    tok.save_pretrained(root / "policy")
    build_tiny_classifier(text + " CHOSEN VIEWER: SLATE: STATE: (none)", root / "disc")
    return {"policy": root / "policy", "disc": root / "disc"}


def overrides(tmp: Path, data: Path, models: dict, **more) -> dict:
    return {
        "model_name_or_path": str(models["policy"]),
        "gail_disc_model": str(models["disc"]),
        "gail_device": "cpu",
        "dataset_name_or_path": str(data),
        "torch_dtype": "float32",
        "output_dir": str(tmp),
        "max_steps": 2,
        "batch_size": 2,
        "num_generations": 2,
        "max_new_tokens": 8,
        "gradient_accumulation_steps": 1,
        "n_eval": 4,
        "eval_batch_size": 4,
        "n_train": 20,
        "logging_steps": 1,
        "save_steps": 0,
        "num_threads": 1,
        **more,
    }


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_each_recipe_runs_two_steps(recipe, data_dir, tiny_models, tmp_path):
    issue = build_config(recipe, {}, environ={}).slates.slate_issue
    cfg = build_config(recipe, overrides(tmp_path, data_dir / ISSUE_DIR[issue], tiny_models), environ={})
    summary = run_training(cfg)
    assert summary["steps"] == 2
    metrics = read_jsonl(tmp_path / "metrics.jsonl")
    grail = "grail" in recipe.stem
    assert all(("grail/alpha" in m) == grail for m in metrics)
    after = summary["eval_after"]
    for key in ("next_click_accuracy", "opinion_accuracy", "parsed_rate", "formatted_rate"):
        assert 0.0 <= after[key] <= 1.0
    assert (tmp_path / "checkpoint-2" / "learned_rewards.pt").is_file() == grail
    if grail:
        for key in ("grail/beta", "disc/loss", "disc/accuracy", "disc/p_expert_pos"):
            assert key in metrics[0]
        # (an untrained policy answers nothing valid: B = D = 0, so the mixer has no gradient here;
        # its direction is tested in test_grail_discriminator.py)
        assert metrics[-1]["grail/alpha"] + metrics[-1]["grail/beta"] == pytest.approx(1.0)
        rollout = json.loads((tmp_path / "rollouts" / "rollouts.jsonl").read_text().splitlines()[0])
        assert "gail" in rollout["rewards"]


def test_gail_use_env_turns_grail_into_grpo(data_dir, tiny_models, tmp_path):
    cli = overrides(tmp_path, data_dir / "gun", tiny_models, max_steps=1, n_eval=0)
    assert load_task(build_config(RECIPES[2], cli, environ={"GAIL_USE": "0"})).scorer_extras() == {}
    cfg = build_config(RECIPES[2], cli, environ={"GAIL_USE": "0", "GAIL_LR": "1e-3"})
    assert (cfg.grail.gail_use, cfg.grail.gail_lr) == (False, 1e-3)
    run_training(cfg)
    assert "grail/alpha" not in read_jsonl(tmp_path / "metrics.jsonl")[0]


def test_tiny_recipe_resumes_discriminator_and_mixer(data_dir, tiny_models, tmp_path):
    """Two steps straight, or one step + resume + one step: the same discriminator and mixer."""
    cli = overrides(tmp_path / "straight", data_dir / "gun", tiny_models, n_eval=0, save_steps=1, gail_lr=1e-2)
    run_training(build_config(TINY_RECIPE, cli, environ={}))
    first = tmp_path / "straight" / "checkpoint-1"
    cli_resume = {**cli, "output_dir": str(tmp_path / "resumed"), "resume_from_checkpoint": str(first)}
    run_training(build_config(TINY_RECIPE, cli_resume, environ={}))
    load = lambda p: torch.load(p / "learned_rewards.pt", weights_only=False)["learned_rewards"]  # noqa: E731
    one, straight, resumed = (
        load(first),
        load(tmp_path / "straight" / "checkpoint-2"),
        load(tmp_path / "resumed" / "checkpoint-2"),
    )
    disc_s, disc_r = straight["learned"]["gail"], resumed["learned"]["gail"]
    assert disc_s["steps"] == disc_r["steps"] == 2 and one["learned"]["gail"]["steps"] == 1
    for k, v in disc_s["model"].items():
        assert torch.allclose(v, disc_r["model"][k], atol=1e-6), k
    assert torch.allclose(straight["mixer"]["logits"], resumed["mixer"]["logits"], atol=1e-6)
    assert not all(torch.equal(v, disc_s["model"][k]) for k, v in one["learned"]["gail"]["model"].items())


def test_tiny_recipe_builds_its_own_models(tmp_path):
    """No model given: the word-tokenizer tiny policy and the tiny discriminator are built from the task."""
    cli = {
        "output_dir": str(tmp_path),
        "max_steps": 2,
        "batch_size": 2,
        "num_generations": 2,
        "max_new_tokens": 8,
        "n_train": 40,
        "n_eval": 4,
        "slate_synthetic_validation": 4,
        "sft_steps": 2,
        "sft_batch_size": 4,
        "sft_target_accuracy": None,
        "tiny_hidden_size": 32,
        "tiny_num_layers": 1,
        "num_threads": 1,
    }
    summary = run_training(build_config(TINY_RECIPE, cli, environ={}))
    assert summary["steps"] == 2
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tmp_path / "sft_model")
    prompt = load_task(build_config(TINY_RECIPE, cli, environ={})).eval_rows[0]["question"]
    assert len(tok(prompt)["input_ids"]) < len(prompt) / 3  # word tokens
    assert (tmp_path / "tiny_discriminator" / "config.json").is_file()
    assert "disc/accuracy" in read_jsonl(tmp_path / "metrics.jsonl")[-1]


def test_frozen_run_logs_alpha_beta_and_the_discriminator_every_step(data_dir, tiny_models, tmp_path):
    """GAIL_EVAL_MODE=1 for the whole run: scored, never trained, and still logged at every step."""
    cli = overrides(tmp_path, data_dir / "gun", tiny_models, n_eval=0, save_steps=2, gail_lr=1e-2)
    cfg = build_config(TINY_RECIPE, cli, environ={"GAIL_EVAL_MODE": "1"})
    run_training(cfg)
    metrics = read_jsonl(tmp_path / "metrics.jsonl")
    assert len(metrics) == 2
    for m in metrics:
        for key in ("grail/alpha", "grail/beta", "disc/loss", "disc/accuracy", "disc/positives"):
            assert key in m, key
        assert (m["grail/alpha"], m["grail/beta"]) == (pytest.approx(2 / 3), pytest.approx(1 / 3))
    state = torch.load(tmp_path / "checkpoint-2" / "learned_rewards.pt", weights_only=False)["learned_rewards"]
    assert state["learned"]["gail"]["steps"] == 0
