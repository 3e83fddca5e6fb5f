"""TRL's loss keys in a recipe become grouprl's loss, loss_options and loss_type."""

from __future__ import annotations

import pytest

from grouprl.config import ConfigError
from grouprl.run_config import build_config


def objective(tmp_path, text: str):
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    cfg = build_config(path, environ={})
    return cfg.objective.loss, cfg.objective.loss_options, cfg.algorithm.loss_type


def test_trl_loss_keys(tmp_path):
    assert objective(tmp_path, "loss_type: cispo\nepsilon_high: 5.0\n") == ("cispo", {"epsilon_max": 5.0}, "dapo")
    assert objective(tmp_path, "loss_type: sapo\nsapo_temperature_neg: 1.2\n") == (
        "sapo",
        {"temperature_neg": 1.2},
        "grpo",
    )
    assert objective(tmp_path, "loss_type: grpo\nimportance_sampling_level: sequence\n") == ("gspo", {}, "grpo")
    assert objective(tmp_path, "loss_type: bnpo\ndelta: 4.0\n") == ("ppo_clip", {"delta": 4.0}, "bnpo")
    assert objective(tmp_path, "loss_type: dr_grpo\nimportance_sampling_level: token\ndelta: null\n") == (
        "ppo_clip",
        {},
        "dr_grpo",
    )
    with pytest.raises(ConfigError, match="importance_sampling_level.*'token' or 'sequence'"):
        objective(tmp_path, "importance_sampling_level: sentence\n")
