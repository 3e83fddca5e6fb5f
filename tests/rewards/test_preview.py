"""``grouprl rewards preview`` / ``rewards list`` on hand-written samples."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from grouprl.reward_preview import add_rewards_parser, list_rewards, load_samples, preview, run_scorer

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gsm8k_completions.jsonl"
# Hand-expected gsm8k_final scores for the fixture, line by line:
# 1 Janet (Final: 18, gold 18) | 2 robe (Final: 3, answer "3") | 3 Josh (Final: 70,000 vs 70000)
# 4 Kylar (Final: 80, gold 64: wrong number) | 5 James (text after the Final line: format missing)
# 6 pens (Final: $12: not a number, format missing)
EXPECTED = [1.0, 1.0, 1.0, 0.1, 0.0, 0.0]

RAISING_REWARD = '''
def picky(completion, ground_truth, **row):
    """1.0 unless the completion mentions sprints, on which it raises."""
    if "sprint" in completion:
        raise ValueError("cannot score sprints")
    return 1.0
'''


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="grouprl")
    sub = parser.add_subparsers(dest="command", required=True)
    add_rewards_parser(sub)
    args = parser.parse_args(argv)
    return args.func(args)


def test_preview_gsm8k_final_scores(tmp_path):
    out = tmp_path / "preview.jsonl"
    rows, n_errors = preview(["gsm8k_final"], FIXTURE, out_path=out)
    assert n_errors == 0
    assert [r["scores"]["gsm8k_final"] for r in rows] == EXPECTED
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 6
    assert records[3] == {
        "index": 3,
        "line": 4,
        "scores": {"gsm8k_final": 0.1},
        "reasons": {"gsm8k_final": None},
        "metrics": {},
        "errors": [],
    }
    assert [r["scores"]["gsm8k_final"] for r in records] == EXPECTED


def test_preview_gold_is_taken_from_full_answer_field():
    samples = load_samples(FIXTURE)
    assert samples[0]["ground_truth"] == "18"  # full GSM8K answer field, '#### 18'
    assert samples[1]["ground_truth"] == "3"  # answer given as the number


def test_cli_preview_writes_out_and_max_samples(tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    rc = run_cli(
        [
            "rewards",
            "preview",
            "--reward",
            "gsm8k_final",
            "--samples",
            str(FIXTURE),
            "--max-samples",
            "4",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["scores"]["gsm8k_final"] for r in records] == EXPECTED[:4]
    assert "gsm8k_final" in capsys.readouterr().out


def test_cli_preview_reward_raising_on_one_sample_exits_1(tmp_path, capsys):
    reward_file = tmp_path / "picky.py"
    reward_file.write_text(RAISING_REWARD)
    out = tmp_path / "o.jsonl"
    rc = run_cli(
        [
            "rewards",
            "preview",
            "--reward",
            "gsm8k_final",
            "--reward",
            f"{reward_file}:picky",
            "--samples",
            str(FIXTURE),
            "--out",
            str(out),
        ]
    )
    assert rc == 1
    captured = capsys.readouterr()
    assert "cannot score sprints" in captured.out
    assert "sample 4 (line 5)" in captured.out
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records[4]["errors"] == [f"{reward_file}:picky: ValueError: cannot score sprints"]
    assert records[4]["scores"] == {"gsm8k_final": 0.0, f"{reward_file}:picky": None}
    assert all(not r["errors"] for i, r in enumerate(records) if i != 4)
    assert [r["scores"]["gsm8k_final"] for r in records] == EXPECTED


def test_preview_malformed_rows_name_the_line(tmp_path, capsys):
    good = FIXTURE.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([good[0], '{"prompt": "2+2?", "response": "4"}', good[1], "{not json", ""]) + "\n")
    rows, n_errors = preview(["gsm8k_final"], bad)
    assert n_errors == 2
    assert [r["scores"]["gsm8k_final"] for r in rows] == [1.0, None, 1.0, None]
    assert rows[1]["errors"][0].startswith("line 2: no 'messages' or 'completion' field")
    assert '"completion": str' in rows[1]["errors"][0]  # says what was expected
    assert rows[3]["errors"][0].startswith("line 4: invalid JSON")
    assert run_cli(["rewards", "preview", "--reward", "gsm8k_final", "--samples", str(bad)]) == 1
    assert "line 2:" in capsys.readouterr().out


def test_preview_messages_form_and_typed_reward(tmp_path):
    path = tmp_path / "msgs.jsonl"
    sample = {
        "messages": [
            {"role": "user", "content": "Give me a person as JSON."},
            {"role": "assistant", "content": '```json\n{"name": "Ada", "age": 36}\n```'},
        ],
        "ground_truth": {"type": "object", "required": ["name", "age"], "properties": {"age": {"type": "integer"}}},
    }
    bad = dict(sample, messages=[sample["messages"][0], {"role": "assistant", "content": '{"name": "Bo"}'}])
    path.write_text(json.dumps(sample) + "\n" + json.dumps(bad) + "\n")
    rows, n_errors = preview(["grouprl.rewards.builtin.structured:json_schema"], path)
    key = "grouprl.rewards.builtin.structured:json_schema"
    assert n_errors == 0
    assert [r["scores"][key] for r in rows] == [1.0, 0.0]
    assert "'age' is a required property" in rows[1]["reasons"][key]
    assert rows[0]["metrics"][key]["valid"]["score"] == 1.0


def test_preview_unknown_reward_is_an_error(capsys):
    with pytest.raises(KeyError):
        preview(["no_such_reward"], FIXTURE)
    assert run_cli(["rewards", "preview", "--reward", "no_such_reward", "--samples", str(FIXTURE)]) == 2
    assert "unknown reward 'no_such_reward'" in capsys.readouterr().err


def test_rewards_list(capsys):
    entries = list_rewards()
    by_name = {e[0]: e for e in entries}
    assert by_name["gsm8k_final"][1:3] == ("plain", "-")
    assert run_cli(["rewards", "list"]) == 0
    assert "gsm8k_final" in capsys.readouterr().out


def test_rewards_list_shows_the_model_and_learned_rewards_with_their_kind(capsys):
    """Every reward a recipe can name: judges, the distilled judge, reward models and learned rewards too,
    and each bare name listed is one the scorer builds as a model reward (not an unknown reward)."""
    from grouprl.rewards.learned.model_rewards import build_reward

    by_name = {e[0]: e for e in list_rewards()}
    for name, kind in [
        ("judge", "model (LLM judge)"),
        ("group_judge", "model (LLM judge)"),
        ("distilled_judge", "learned"),
        ("path/to/model | owner/name", "model (reward model)"),
        ("path/to/file.py:make_reward", "learned"),
    ]:
        assert by_name[name][1] == kind, name
    for name in ("judge", "group_judge", "distilled_judge"):
        with pytest.raises(Exception) as err:  # no endpoint given: the model reward's own error, not "unknown"
            build_reward(name, {})
        assert "unknown reward" not in str(err.value), (name, err.value)
    assert run_cli(["rewards", "list"]) == 0
    out = capsys.readouterr().out
    assert "group_judge" in out and "distilled_judge" in out


def test_cli_preview_with_a_recipe_scores_as_training_does(tmp_path):
    """--config: the recipe's rewards with their options and normalised weights (the run's scorer)."""
    from grouprl.rewards.registry import get_reward

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "rewards:\n  - {name: gsm8k_final, weight: 3, options: {strict: true}}\n  - {name: format, weight: 1}\n"
    )
    out = tmp_path / "o.jsonl"
    assert run_cli(["rewards", "preview", "--config", str(recipe), "--samples", str(FIXTURE), "--out", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    samples = load_samples(FIXTURE)
    strict = [get_reward("gsm8k_final")(s["completion"], s["ground_truth"], strict=True) for s in samples]
    assert [r["scores"]["gsm8k_final"] for r in records] == strict
    rows, _ = preview(None, FIXTURE, scorer=run_scorer(str(recipe)))
    for row in rows:  # weights 3 : 1 normalised, as in training
        assert row["total"] == pytest.approx(0.75 * row["scores"]["gsm8k_final"] + 0.25 * row["scores"]["format"])
    assert run_cli(["rewards", "preview", "--samples", str(FIXTURE)]) == 2  # neither --reward nor --config
