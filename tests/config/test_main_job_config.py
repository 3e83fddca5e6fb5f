"""Which job `grouprl train` runs: the real-model main job when nothing is chosen, the tiny job one
flag away, and every run that names a recipe, a model or a task starting from the field defaults
as before. No model loads here."""

from __future__ import annotations

from pathlib import Path

import pytest

from grouprl import cli
from grouprl.config.main_job import MAIN_JOBS, MAIN_MODEL
from grouprl.run_config import build_config

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "SmolLM2-135M-Instruct" / "grpo" / "config_arithmetic.yaml"


def _train_config(*argv: str):
    args = cli.build_parser().parse_args(["train", *argv])
    return cli.config_from_args(args, cli.built_in_job(args))


def test_a_bare_train_is_the_real_model_main_job():
    cfg = _train_config()
    assert cfg.model.model_name_or_path == MAIN_MODEL == "smollm2-135m-instruct"
    assert cfg.task.task == "arithmetic" and cfg.arithmetic.arithmetic_answer == "last_number"
    assert "{question}" in cfg.arithmetic.arithmetic_prompt
    assert cfg.eval.n_eval >= 200 and cfg.logging.num_completions_to_print > 0


def test_flags_tune_the_main_job_without_leaving_it():
    cfg = _train_config("--seed", "2", "--max_steps", "3")
    assert cfg.model.model_name_or_path == MAIN_MODEL and cfg.train.seed == 2 and cfg.train.max_steps == 3


def test_the_tiny_job_is_one_flag_away_and_is_the_field_defaults():
    tiny = _train_config("--model", "tiny")
    assert tiny.model.model_name_or_path is None  # grouprl builds and SFT-warms its tiny model
    assert tiny.model_dump() == build_config(None, {}, environ={}).model_dump()
    assert MAIN_JOBS["tiny"] == {}


@pytest.mark.parametrize("argv", [["--model_name_or_path", "some/model"], ["--task", "gsm8k"]])
def test_naming_a_model_or_a_task_starts_from_the_field_defaults(argv):
    cfg = _train_config(*argv)
    defaults = build_config(None, {}, environ={})
    assert cfg.train.learning_rate == defaults.train.learning_rate
    assert cfg.arithmetic.arithmetic_prompt is None and cfg.model.model_name_or_path != MAIN_MODEL


def test_a_model_in_the_environment_starts_from_the_field_defaults(monkeypatch):
    monkeypatch.setenv("MODEL_NAME", "some/model")
    assert _train_config().arithmetic.arithmetic_prompt is None


def test_a_recipe_starts_from_the_field_defaults(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("max_steps: 3\n")
    cfg = _train_config("--config", str(recipe))
    assert cfg.model.model_name_or_path is None and cfg.train.max_steps == 3


def test_a_built_in_job_and_a_recipe_together_are_one_line(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("max_steps: 3\n")
    assert cli.main(["train", "--model", "tiny", "--config", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--model tiny" in err[0] and "--config" in err[0]


def test_the_shipped_recipe_is_the_main_job():
    assert build_config(RECIPE, environ={}).model_dump() == _train_config().model_dump()
