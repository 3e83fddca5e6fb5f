"""Configuration: precedence, seed environment variables, recipes, and errors before any model loads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import RECIPE, REPO_ROOT
from grouprl import cli
from grouprl.config import ENV_VARS, FIELD_SECTION, SECTIONS, Config, ConfigError, flat_dict
from grouprl.run_config import build_config, check_names

GROUPRL_BIN = Path(sys.executable).parent / "grouprl"


def write_recipe(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def defaults() -> Config:
    """The defaults, with the task's max_new_tokens filled in as where names are resolved."""
    return check_names(Config())


# --- precedence -------------------------------------------------------------------------------


def test_defaults_without_any_layer():
    cfg = build_config(None, None, environ={})
    assert cfg == defaults()
    assert cfg.train.max_steps == 400
    assert cfg.train.learning_rate == 3e-4
    assert cfg.rollout.num_generations == 8
    assert cfg.algorithm.loss_type == "dapo"
    assert cfg.task.task == "arithmetic"
    assert cfg.model.model_name_or_path is None


def test_precedence_defaults_recipe_env_cli(tmp_path):
    recipe = write_recipe(
        tmp_path / "r.yaml",
        {
            "train": {"max_steps": 10, "learning_rate": 1e-3, "seed": 5},
            "rollout": {"num_generations": 4, "batch_size": 3},
        },
    )
    environ = {"MAX_STEPS": "20", "LR": "0.002", "NUM_GENERATIONS": "6"}
    cli_values = {"max_steps": 30}
    cfg = build_config(recipe, cli_values, environ=environ)
    assert cfg.train.max_steps == 30  # CLI beats env beats recipe
    assert cfg.train.learning_rate == 0.002  # env beats recipe
    assert cfg.rollout.num_generations == 6  # env beats recipe
    assert cfg.train.seed == 5  # recipe beats default
    assert cfg.rollout.batch_size == 3  # recipe beats default
    assert cfg.rollout.max_new_tokens == 6  # untouched default

    # drop the CLI layer: env shows through; drop env too: the recipe shows through
    assert build_config(recipe, None, environ=environ).train.max_steps == 20
    assert build_config(recipe, None, environ={}).train.max_steps == 10
    assert build_config(recipe, None, environ={}).train.learning_rate == 1e-3


def test_grouprl_env_var_for_any_field_sits_between_recipe_and_cli(tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", {"beta": 0.5, "rewards": ["x"], "use_peft": False})
    environ = {"GROUPRL_BETA": "0.1", "GROUPRL_REWARDS": "[gsm8k_final, arithmetic_exact]", "GROUPRL_USE_PEFT": "true"}
    cfg = build_config(recipe, None, environ=environ)
    assert cfg.algorithm.beta == 0.1
    assert cfg.task.rewards == ["gsm8k_final", "arithmetic_exact"]  # YAML-parsed list from the environment
    assert cfg.model.use_peft is True
    assert build_config(recipe, {"beta": 0.3}, environ=environ).algorithm.beta == 0.3


def test_empty_env_values_are_ignored():
    cfg = build_config(None, None, environ={"MAX_STEPS": "", "GROUPRL_BETA": ""})
    assert cfg.train.max_steps == 400
    assert cfg.algorithm.beta == 0.0


def test_process_environment_is_read_when_environ_not_given(monkeypatch):
    monkeypatch.setenv("MAX_STEPS", "17")
    assert build_config(None, None).train.max_steps == 17


def test_seed_env_var_table_is_the_seed_scripts():
    from grouprl.config.task_sections import GrailConfig  # GRAIL's switches keep the original's names

    assert set(ENV_VARS) - set(GrailConfig.env_aliases) == {
        "MODEL_NAME",
        "OUTPUT_DIR",
        "MAX_STEPS",
        "NUM_GENERATIONS",
        "MAX_NEW_TOKENS",
        "BATCH_SIZE",
        "GRAD_ACCUM",
        "LR",
        "N_TRAIN",
        "N_EVAL",
        "SEED",
    }


@pytest.mark.parametrize(
    "var, raw, section, field, expected",
    [
        ("MODEL_NAME", "Qwen/Qwen2.5-0.5B-Instruct", "model", "model_name_or_path", "Qwen/Qwen2.5-0.5B-Instruct"),
        ("OUTPUT_DIR", "/tmp/somewhere/run1", "train", "output_dir", "/tmp/somewhere/run1"),
        ("MAX_STEPS", "7", "train", "max_steps", 7),
        ("NUM_GENERATIONS", "4", "rollout", "num_generations", 4),
        ("MAX_NEW_TOKENS", "64", "rollout", "max_new_tokens", 64),
        ("BATCH_SIZE", "3", "rollout", "batch_size", 3),
        ("GRAD_ACCUM", "2", "train", "gradient_accumulation_steps", 2),
        ("LR", "1e-5", "train", "learning_rate", 1e-5),
        ("N_TRAIN", "50", "task", "n_train", 50),
        ("N_EVAL", "0", "eval", "n_eval", 0),
        ("SEED", "42", "train", "seed", 42),
    ],
)
def test_each_seed_env_var_maps_to_its_field(var, raw, section, field, expected):
    default = getattr(getattr(defaults(), section), field)
    assert default != expected, "pick a test value that differs from the default"
    cfg = build_config(None, None, environ={var: raw})
    value = getattr(getattr(cfg, section), field)
    assert value == expected and type(value) is type(expected)
    # and nothing else changed
    changed = {k for k, v in flat_dict(cfg).items() if v != flat_dict(defaults())[k]}
    assert changed == {field}


def test_grail_switches_read_their_launchers_variables_below_the_flags():
    cfg = build_config(
        None,
        {"gail_lr": 1e-4, "grail_max_history": 3},
        environ={"GAIL_LR": "5e-3", "GAIL_USE": "0", "GRAIL_SHOW_IDS": "1"},
    )
    grail = cfg.grail
    assert (grail.gail_lr, grail.gail_use, grail.grail_max_history, grail.grail_show_ids) == (1e-4, False, 3, True)
    with pytest.raises(ConfigError, match="'gail_use' .*got 'maybe'"):
        build_config(None, None, environ={"GAIL_USE": "maybe"})


def test_bad_seed_env_value_names_key_and_value():
    with pytest.raises(ConfigError) as err:
        build_config(None, None, environ={"MAX_STEPS": "abc"})
    msg = str(err.value)
    assert "max_steps" in msg and "'abc'" in msg and "integer" in msg


# --- recipes ----------------------------------------------------------------------------------


def test_flat_and_nested_recipes_are_equivalent(tmp_path):
    nested = write_recipe(
        tmp_path / "nested.yaml",
        {
            "model": {"torch_dtype": "float32"},
            "algorithm": {"beta": 0.04, "loss_type": "grpo"},
            "train": {"max_steps": 9, "learning_rate": 1.0e-6},
            "task": {"rewards": ["gsm8k_final"]},
        },
    )
    flat = write_recipe(
        tmp_path / "flat.yaml",
        {
            "torch_dtype": "float32",
            "beta": 0.04,
            "loss_type": "grpo",
            "max_steps": 9,
            "learning_rate": 1.0e-6,
            "rewards": ["gsm8k_final"],
        },
    )
    mixed = write_recipe(
        tmp_path / "mixed.yaml",
        {
            "model": {"torch_dtype": "float32"},
            "beta": 0.04,
            "loss_type": "grpo",
            "train": {"max_steps": 9},
            "learning_rate": 1.0e-6,
            "rewards": ["gsm8k_final"],
        },
    )
    a, b, c = (build_config(p, None, environ={}) for p in (nested, flat, mixed))
    assert a == b == c
    assert a.algorithm.beta == 0.04 and a.algorithm.loss_type == "grpo"
    assert a.train.max_steps == 9 and a.train.learning_rate == 1e-6
    assert a.model.torch_dtype == "float32" and a.task.rewards == ["gsm8k_final"]
    assert a != defaults()


def test_yaml_scientific_notation_in_recipe(tmp_path):
    # "1e-6" without a dot is a string for PyYAML; pydantic still has to accept it as a float.
    recipe = write_recipe(tmp_path / "r.yaml", "train:\n  learning_rate: 1e-6\n")
    assert build_config(recipe, None, environ={}).train.learning_rate == 1e-6


def test_empty_recipe_gives_defaults(tmp_path):
    assert build_config(write_recipe(tmp_path / "e.yaml", ""), None, environ={}) == defaults()


def test_shipped_gsm8k_recipe_loads():
    cfg = build_config(RECIPE, None, environ={})
    assert cfg.model.model_name_or_path == "Qwen/Qwen2.5-0.5B-Instruct"
    assert cfg.task.task == "gsm8k" and cfg.task.rewards == ["gsm8k_final"]
    assert cfg.rollout.num_generations == 8 and cfg.rollout.batch_size == 4 and cfg.rollout.max_new_tokens == 256
    assert cfg.algorithm.beta == 0.04 and cfg.algorithm.loss_type == "grpo"
    assert cfg.train.learning_rate == 1e-6 and cfg.train.gradient_accumulation_steps == 4
    assert cfg.eval.eval_max_new_tokens == 512 and cfg.eval.n_eval == 200


def test_unknown_flat_key_in_recipe(tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", {"max_steps": 3, "max_stepz": 4})
    with pytest.raises(ConfigError) as err:
        build_config(recipe, None, environ={})
    msg = str(err.value)
    assert "'max_stepz'" in msg and "4" in msg and str(recipe) in msg


def test_key_in_the_wrong_section_of_recipe(tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", {"train": {"beta": 0.1}})  # beta lives in algorithm
    with pytest.raises(ConfigError) as err:
        build_config(recipe, None, environ={})
    msg = str(err.value)
    assert "train.beta" in msg and "0.1" in msg


def test_section_that_is_not_a_mapping(tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", {"train": 5})
    with pytest.raises(ConfigError, match="section 'train' must be a mapping"):
        build_config(recipe, None, environ={})


def test_recipe_that_is_not_a_mapping(tmp_path):
    with pytest.raises(ConfigError, match="expected a mapping"):
        build_config(write_recipe(tmp_path / "r.yaml", "- a\n- b\n"), None, environ={})


def test_missing_recipe_file(tmp_path):
    with pytest.raises(ConfigError, match="no such recipe file"):
        build_config(tmp_path / "nope.yaml", None, environ={})


# --- unknown keys and bad values --------------------------------------------------------------


def test_unknown_grouprl_env_var():
    with pytest.raises(ConfigError) as err:
        build_config(None, None, environ={"GROUPRL_FOO": "bar"})
    msg = str(err.value)
    assert "GROUPRL_FOO" in msg and "'foo'" in msg and "'bar'" in msg


def test_grouprl_variables_of_other_parts_are_not_config_keys():
    """GROUPRL_CACHE (the model cache, documented in docs/real_models.md) and every other GROUPRL_*
    variable that grouprl reads outside the config must not stop `grouprl train`."""
    from grouprl.config.load import RESERVED_ENV_VARS

    read = set()
    for path in [
        *(REPO_ROOT / "src").rglob("*.py"),
        *(REPO_ROOT / "slurm").glob("*"),
        *(REPO_ROOT / "docs").glob("*.md"),
    ]:
        for a, b in re.findall(r"\$\{?(GROUPRL_[A-Z_]+)|environ(?:\.get\(|\[)\"(GROUPRL_[A-Z_]+)", path.read_text()):
            read.add(a or b)
    assert "GROUPRL_CACHE" in read and "GROUPRL_VENV" in read
    not_fields = {v for v in read if v[len("GROUPRL_") :].lower() not in FIELD_SECTION}
    assert not_fields <= set(RESERVED_ENV_VARS), not_fields - set(RESERVED_ENV_VARS)
    assert build_config(None, None, environ={var: "/tmp/somewhere" for var in RESERVED_ENV_VARS}) == defaults()


def test_cli_train_starts_with_grouprl_cache_set(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GROUPRL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GROUPRL_FOO", "bar")  # still refused: the run stops before any model loads
    assert cli.main(["train", "--output_dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "GROUPRL_FOO" in err and "GROUPRL_CACHE" not in err


def test_unrelated_env_vars_are_ignored():
    cfg = build_config(None, None, environ={"FOO": "1", "PATH": "/usr/bin", "WANDB_PROJECT": "x"})
    assert cfg == defaults()


def test_unknown_cli_key():
    with pytest.raises(ConfigError) as err:
        build_config(None, {"foo": 3}, environ={})
    msg = str(err.value)
    assert "command line" in msg and "'foo'" in msg and "3" in msg


@pytest.mark.parametrize(
    "key, value, expected_words",
    [
        ("max_steps", -1, ["greater than 0"]),
        ("loss_type", "foo", ["'grpo'", "'dapo'", "'dr_grpo'"]),
        ("learning_rate", "abc", ["valid number"]),
        ("advantage", "ppo", ["'grpo'", "'dr_grpo'", "'rloo'"]),
        ("top_p", 1.5, ["less than or equal to 1"]),
        ("num_generations", 1, ["greater than or equal to 2"]),
        ("use_peft", "maybe", ["valid boolean"]),
    ],
)
@pytest.mark.parametrize("layer", ["recipe", "env", "cli"])
def test_bad_value_names_key_value_and_expectation(tmp_path, key, value, expected_words, layer):
    if layer == "recipe":
        args = (write_recipe(tmp_path / "r.yaml", {key: value}), None, {})
    elif layer == "env":
        args = (None, None, {f"GROUPRL_{key.upper()}": str(value)})
    else:
        args = (None, {key: value}, {})
    with pytest.raises(ConfigError) as err:
        build_config(*args[:2], environ=args[2])
    msg = str(err.value)
    assert f"'{key}'" in msg
    assert repr(value) in msg or str(value) in msg
    for word in expected_words:
        assert word in msg, (word, msg)


def test_all_bad_values_are_reported_at_once():
    with pytest.raises(ConfigError) as err:
        build_config(None, {"max_steps": -1, "loss_type": "foo"}, environ={})
    msg = str(err.value)
    assert "'max_steps'" in msg and "'loss_type'" in msg


# --- through the real command line ------------------------------------------------------------


def test_cli_flags_are_parsed_into_typed_values(monkeypatch):
    monkeypatch.setenv("MAX_STEPS", "20")
    monkeypatch.setenv("SEED", "3")
    args = cli.build_parser().parse_args(
        [
            "train",
            "--max_steps",
            "5",
            "--learning_rate",
            "1e-4",
            "--use_peft",
            "true",
            "--lora_target_modules",
            "q_proj",
            "v_proj",
            "--reward_weights",
            "1",
            "0.5",
            "--eval_max_new_tokens",
            "null",
        ]
    )
    cfg = cli.config_from_args(args)
    assert cfg.train.max_steps == 5  # flag beats MAX_STEPS
    assert cfg.train.seed == 3  # env shows through where no flag is given
    assert cfg.train.learning_rate == 1e-4
    assert cfg.model.use_peft is True
    assert cfg.model.lora_target_modules == ["q_proj", "v_proj"]
    assert cfg.task.reward_weights == [1.0, 0.5]
    assert cfg.eval.eval_max_new_tokens is None
    assert cfg.rollout.batch_size == 16  # not given anywhere


def test_cli_recipe_then_flag(tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", {"train": {"max_steps": 10, "seed": 9}})
    args = cli.build_parser().parse_args(["train", "--config", str(recipe), "--max_steps", "4"])
    cfg = cli.config_from_args(args)
    assert cfg.train.max_steps == 4 and cfg.train.seed == 9


def test_cli_bad_value_exits_2_before_any_model_load_in_process(tmp_path, capsys):
    out = tmp_path / "run"
    start = time.perf_counter()
    rc = cli.main(["train", "--max_steps", "-3", "--output_dir", str(out)])
    assert rc == 2
    assert time.perf_counter() - start < 10
    err = capsys.readouterr().err
    assert "max_steps" in err and "-3" in err and "greater than 0" in err
    assert not out.exists()


def test_cli_bad_recipe_value_exits_2(tmp_path, capsys):
    recipe = write_recipe(tmp_path / "r.yaml", {"loss_type": "foo", "output_dir": str(tmp_path / "run")})
    assert cli.main(["train", "--config", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "loss_type" in err and "'foo'" in err
    assert not (tmp_path / "run").exists()


def test_cli_unknown_env_var_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GROUPRL_FOO", "bar")
    assert cli.main(["train", "--output_dir", str(tmp_path / "run")]) == 2
    assert "GROUPRL_FOO" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_cli_unknown_flag_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["train", "--max_stepz", "3"])
    assert exc.value.code == 2
    assert "--max_stepz" in capsys.readouterr().err


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS and not k.startswith("GROUPRL_")}
    env["COLUMNS"] = "100"
    return env


@pytest.mark.skipif(not GROUPRL_BIN.exists(), reason=f"console script not installed at {GROUPRL_BIN}")
def test_cli_bad_value_subprocess_exits_2_fast(tmp_path):
    out = tmp_path / "run"
    start = time.perf_counter()
    proc = subprocess.run(
        [str(GROUPRL_BIN), "train", "--max_steps", "-3", "--output_dir", str(out)],
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=60,
    )
    elapsed = time.perf_counter() - start
    assert proc.returncode == 2, proc.stderr
    assert "max_steps" in proc.stderr and "-3" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert elapsed < 10
    assert not out.exists()


# --- help -------------------------------------------------------------------------------------


def _help(argv: list[str], capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # undo argparse's line wrapping


def _field_default(name: str):
    field = SECTIONS[FIELD_SECTION[name]].model_fields[name]
    return field.default_factory() if field.default_factory else field.default


def _assert_lists_every_field(text: str) -> None:
    missing = []
    for name in FIELD_SECTION:
        opt = f"--{name} "
        at = text.rfind(opt)  # the option's own entry comes after the usage line
        if at < 0:
            missing.append(f"{name}: no {opt!r}")
            continue
        nxt = text.find(" --", at + len(opt))
        entry = text[at : nxt if nxt > 0 else len(text)]
        if f"(default: {_field_default(name)})" not in entry:
            missing.append(f"{name}: {entry!r}")
    assert not missing, "fields without '(default: ...)':\n" + "\n".join(missing)


def test_train_help_lists_every_field_with_default(capsys, monkeypatch):
    text = _help(["train", "--help"], capsys, monkeypatch)
    _assert_lists_every_field(text)
    # hand-checked defaults
    for snippet in [
        "(default: 400)",
        "(default: 0.0003)",
        "(default: dapo)",
        "(default: arithmetic)",
        "(default: ['q_proj', 'k_proj', 'v_proj', 'o_proj'])",
        "(default: outputs/grouprl)",
    ]:
        assert snippet in text
    for var in ENV_VARS:
        assert var in text  # the description names the seed variables


def test_top_level_help_lists_every_field_with_default(capsys, monkeypatch):
    # not only `grouprl train --help`: the top-level help lists the subcommands and every field too
    text = _help(["--help"], capsys, monkeypatch)
    for sub in ("train", "eval", "plot", "init-model"):
        assert sub in text
    _assert_lists_every_field(text)


@pytest.mark.skipif(not GROUPRL_BIN.exists(), reason=f"console script not installed at {GROUPRL_BIN}")
def test_train_help_subprocess():
    proc = subprocess.run(
        [str(GROUPRL_BIN), "train", "--help"], capture_output=True, text=True, env=_clean_env(), timeout=60
    )
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    _assert_lists_every_field(text)
    assert len(re.findall(r"\(default: ", text)) >= len(FIELD_SECTION)


def test_unknown_reward_name_fails_before_any_model_loads(tmp_path, capsys):
    from grouprl.cli import main

    out = tmp_path / "never"
    assert main(["train", "--rewards", "no_such_reward", "--output_dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "rewards" in err and "no_such_reward" in err and "arithmetic_digits" in err
    assert not (out / "tiny_model").exists()  # stopped before building or loading a model


def test_agent_fields_and_task_defaults(tmp_path):
    cfg = build_config(None, {"task": "gridworld", "advantage": "gigpo"}, environ={})
    assert cfg.rollout.max_new_tokens == 24 and cfg.rollout.max_episode_steps == 10
    assert cfg.algorithm.gamma == 0.95 and cfg.algorithm.step_advantage_weight == 1.0
    assert cfg.algorithm.gigpo_norm == "mean_norm" and cfg.rollout.invalid_action_penalty == 0.1
    assert build_config(None, {}, environ={}).rollout.max_new_tokens == 6  # arithmetic keeps its cap
    assert build_config(None, {"task": "gridworld", "max_new_tokens": 9}, environ={}).rollout.max_new_tokens == 9
    shipped = build_config(REPO_ROOT / "recipes" / "tiny" / "gridworld_gigpo.yaml", environ={})
    assert shipped.task.task == "gridworld" and shipped.algorithm.advantage == "gigpo"


@pytest.mark.parametrize(
    "key,value,words",
    [
        ("anchor_mode", "fuzzy", ["anchor_mode", "fuzzy", "exact", "similarity"]),
        ("gigpo_norm", "std", ["gigpo_norm", "std", "mean_norm"]),
        ("gamma", 1.5, ["gamma", "1.5", "less than or equal to 1"]),
        ("task", "alfworld", ["task", "alfworld", "gridworld"]),
    ],
)
def test_bad_agent_values_are_named(key, value, words):
    with pytest.raises(ConfigError) as err:
        build_config(None, {key: value}, environ={})
    for word in words:
        assert word in str(err.value)
