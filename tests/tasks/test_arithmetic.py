"""The arithmetic task asked in words, for chat models: the prompt template, the last-number reward
and its predictor, and the bare task (the tiny model's) left as it was."""

from __future__ import annotations

import pytest

from grouprl.config import ConfigError
from grouprl.rewards.builtin.number_answer import arithmetic_last_number, last_number
from grouprl.rewards.registry import get_reward
from grouprl.run_config import build_config
from grouprl.tasks import load_task

WORDS = "Compute {question}. Reply with only the number."


def _task(**cli):
    return load_task(build_config(None, {"n_eval": 20, "n_train": 100, **cli}, environ={}))


def test_the_bare_task_is_unchanged():
    task = _task()
    assert task.eval_rows[0]["question"].replace("+", "").isdigit()  # '94+37'
    assert task.reward_names == ["arithmetic_digits"] and task.correct_reward == "arithmetic_exact"


def test_a_prompt_template_asks_in_words_about_the_same_sums():
    bare, worded = _task(), _task(arithmetic_prompt=WORDS, arithmetic_answer="last_number")
    for plain, row in zip(bare.eval_rows, worded.eval_rows):
        a, b = plain["question"].split("+")
        assert row["question"] == f"Compute {a} + {b}. Reply with only the number."
        assert row["ground_truth"] == plain["ground_truth"] == str(int(a) + int(b))
    assert worded.messages(worded.eval_rows[0]) == [{"role": "user", "content": worded.eval_rows[0]["question"]}]
    assert worded.reward_names == ["arithmetic_last_number"] and worded.correct_reward == "arithmetic_last_number"
    held_out = {r["question"] for r in worded.eval_rows}
    assert not held_out & {r["question"] for r in worded.train_rows}


def test_a_template_without_the_question_is_one_line():
    with pytest.raises(ConfigError, match="arithmetic_prompt.*'{question}'"):
        _task(arithmetic_prompt="Compute the sum.")


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("82 + 95 = 177", 1.0),
        ("177", 1.0),
        ("The answer is 177.", 1.0),
        ("177\n", 1.0),
        ("82 + 95 = 167", 0.0),  # wrong sum
        ("177 or maybe 176", 0.0),  # the last number decides: a list of guesses ending wrong earns nothing
        ("To compute 82 + 95, we need", 0.0),  # ran out of tokens: the last number is an operand
        ("", 0.0),
        ("one hundred seventy-seven", 0.0),
        ("\uff11\uff17\uff17", 0.0),  # full-width digits are not the ASCII gold
        ("1770", 0.0),
        ("-177", 0.0),
    ],
)
def test_the_last_number_reward(reply, expected):
    assert arithmetic_last_number(reply, "177") == expected
    assert get_reward("arithmetic_last_number")(reply, "177") == expected


def test_the_predictor_is_the_last_number():
    assert last_number("82 + 95 = 177.") == "177"
    assert last_number("no digits") is None
