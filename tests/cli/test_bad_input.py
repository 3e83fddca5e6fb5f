"""Every bad input a user can make: one line naming the file/row/field/reward, found vs expected,
exit code 2, before any model loads (the model path is an empty dir: loading it would fail
differently). Through the real CLI. Internal errors keep their traceback; LOGLEVEL=DEBUG shows
the long form of these too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grouprl.cli import main
from run_helpers import train, user_file

GOOD_ROW = {"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}


def _gsm8k_dir(tmp_path: Path, train_text: str) -> Path:
    d = tmp_path / "gsm8k"
    d.mkdir()
    (d / "train.jsonl").write_text(train_text)
    (d / "test.jsonl").write_text(json.dumps(GOOD_ROW) + "\n")
    return d


def _one_line(capsys, after_model_load: bool = False) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    if after_model_load:  # the weights' loading bar came first; the error is still one line
        err = err.splitlines()[-1]
    assert err.count("\n") == 0, err
    assert err.startswith("grouprl: error: "), err
    return err


@pytest.fixture()
def not_a_model(tmp_path) -> Path:
    d = tmp_path / "not_a_model"
    d.mkdir()
    return d


def _run(model: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "train",
            "--model_name_or_path",
            str(model),
            "--output_dir",
            str(out),
            "--max_steps",
            "1",
            "--n_eval",
            "0",
            *extra,
        ]
    )


def test_empty_dataset(tmp_path, not_a_model, capsys):
    data = _gsm8k_dir(tmp_path, "")
    assert _run(not_a_model, tmp_path / "o", "--task", "gsm8k", "--dataset_name_or_path", str(data)) == 2
    err = _one_line(capsys)
    assert "no training rows" in err and str(data) in err and "expected at least one" in err


def test_malformed_jsonl_row(tmp_path, not_a_model, capsys):
    data = _gsm8k_dir(tmp_path, json.dumps(GOOD_ROW) + '\n{"question": "x", \n')
    assert _run(not_a_model, tmp_path / "o", "--task", "gsm8k", "--dataset_name_or_path", str(data)) == 2
    err = _one_line(capsys)
    assert f"{data / 'train.jsonl'}:2" in err and "not valid JSON" in err


def test_gsm8k_row_without_gold(tmp_path, not_a_model, capsys):
    data = _gsm8k_dir(tmp_path, json.dumps({"question": "q?", "answer": "it is 5"}) + "\n")
    assert _run(not_a_model, tmp_path / "o", "--task", "gsm8k", "--dataset_name_or_path", str(data)) == 2
    err = _one_line(capsys)
    assert "row 0" in err and "'#### '" in err and "it is 5" in err


def test_missing_model_path(tmp_path, capsys):
    assert _run(tmp_path / "no" / "such" / "model", tmp_path / "o") == 2
    err = _one_line(capsys)
    assert "model_name_or_path" in err and "does not exist" in err and "Repo id" not in err


def test_yaml_syntax_error_names_the_file(tmp_path, not_a_model, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("train:\n  max_steps: 3\n  learning_rate: [1e-3\n")
    assert (
        main(
            [
                "train",
                "--config",
                str(recipe),
                "--model_name_or_path",
                str(not_a_model),
                "--output_dir",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    err = _one_line(capsys)
    assert str(recipe) in err and "YAML syntax error at line" in err


def test_zero_reward_weights_before_the_model(tmp_path, not_a_model, capsys):
    assert _run(not_a_model, tmp_path / "o", "--reward_weights", "0") == 2
    err = _one_line(capsys)
    assert "rewards" in err and "[0.0]" in err and "positive" in err


def test_negative_eval_max_new_tokens(tmp_path, not_a_model, capsys):
    assert _run(not_a_model, tmp_path / "o", "--eval_max_new_tokens", "-5") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "eval_max_new_tokens" in err and "-5" in err and "greater than 0" in err


def test_user_reward_raising_at_import(tmp_path, not_a_model, capsys):
    reward = user_file(tmp_path, "broken.py", "import math\nRATE = 1 / 0\ndef fn(c, t):\n    return 1.0\n")
    assert _run(not_a_model, tmp_path / "o", "--rewards", f"{reward}:fn") == 2
    err = _one_line(capsys)
    assert f"{reward}:fn" in err and "line 2" in err and "ZeroDivisionError" in err


def test_reward_returning_a_string_names_the_reward(tiny_arithmetic_dir, tmp_path, capsys):
    reward = user_file(tmp_path, "stringy.py", "def fn(completion, ground_truth, **kw):\n    return 'great'\n")
    assert train(tiny_arithmetic_dir, tmp_path / "o", "--rewards", f"{reward}:fn") == 2
    err = _one_line(capsys, after_model_load=True)
    assert f"{reward}:fn" in err and "returned str 'great'" in err and "expected a float or None" in err


def test_debug_shows_the_long_form(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("train: [unclosed\n")
    src = Path(__file__).resolve().parents[2] / "src"
    p = subprocess.run(
        [sys.executable, "-m", "grouprl.cli", "train", "--config", str(recipe)],
        capture_output=True,
        text=True,
        env={**os.environ, "LOGLEVEL": "DEBUG", "PYTHONPATH": str(src)},
        timeout=120,
    )
    assert p.returncode == 2 and "Traceback" in p.stderr and "YAML syntax error" in p.stderr
