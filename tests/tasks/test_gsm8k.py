"""GSM8K: the gold number after '####' for every row, and the 'Final: <number>' reward (seed rule and strict)."""

from __future__ import annotations

import json

import pytest

from grouprl.rewards.builtin.gsm8k import extract_final, extract_gold, gsm8k_final, normalize_number
from grouprl.rewards.registry import get_reward


def _rows(gsm8k_dir):
    rows = []
    for split in ("train", "test"):
        with open(gsm8k_dir / f"{split}.jsonl") as fh:
            rows += [json.loads(line) for line in fh if line.strip()]
    return rows


def test_extract_gold_on_every_local_answer(gsm8k_dir):
    rows = _rows(gsm8k_dir)
    assert len(rows) == 8792  # 7473 train + 1319 test
    failures = [r["answer"][-60:] for r in rows if extract_gold(r["answer"]) is None]
    assert not failures, failures[:5]
    for r in rows:
        gold = extract_gold(r["answer"])
        # a plain number: optional minus, digits, optional decimals, no commas
        assert gold.lstrip("-").replace(".", "", 1).isdigit(), gold
        assert float(gold) == float(r["answer"].rsplit("####", 1)[1].strip().replace(",", ""))


def test_thousands_commas_in_gold(gsm8k_dir):
    rows = _rows(gsm8k_dir)
    with_comma = [r for r in rows if "," in r["answer"].rsplit("####", 1)[1]]
    assert len(with_comma) == 93
    for r in with_comma:
        gold = extract_gold(r["answer"])
        assert gold is not None and "," not in gold
        assert gold == r["answer"].rsplit("####", 1)[1].strip().replace(",", "")


def test_first_test_row_gold(gsm8k_dir):
    first = _rows(gsm8k_dir)[7473]  # test.jsonl row 0: Janet's ducks
    assert first["question"].startswith("Janet")
    assert extract_gold(first["answer"]) == "18"


@pytest.mark.parametrize(
    "answer, gold",
    [
        ("She makes 9 * 2 = $18.\n#### 18", "18"),
        ("...\n#### 1,080", "1080"),
        ("...\n#### 1,234,567", "1234567"),
        ("...\n#### -5", "-5"),
        ("...\n#### 2.50", "2.5"),
        ("...\n#### 100", "100"),  # not '1E+2'
        ("...\n####  42  \n", "42"),
        ("no marker 42", None),
        ("...\n#### twelve", None),
    ],
)
def test_extract_gold_cases(answer, gold):
    assert extract_gold(answer) == gold


@pytest.mark.parametrize(
    "text, expected",
    [
        ("18", "18"),
        ("18.00", "18"),
        ("1,080", "1080"),
        ("1,234.50", "1234.5"),
        ("-3", "-3"),
        ("100", "100"),
        ("1000000", "1000000"),
        ("0.10", "0.1"),
        ("abc", None),
        ("", None),
        ("NaN", None),
        ("Infinity", None),
    ],
)
def test_normalize_number(text, expected):
    assert normalize_number(text) == expected


REASONING = "Janet has 16 eggs.\nShe uses 7.\n16 - 7 = 9, and 9 * 2 = 18.\n"


@pytest.mark.parametrize(
    "completion, gold, reward",
    [
        # the contract: exactly one last line 'Final: <number>'
        (REASONING + "Final: 18", "18", 1.0),
        ("Final: 18", "18", 1.0),
        (REASONING + "Final: 17", "18", 0.1),  # format right, number wrong
        (REASONING + "Final:18", "18", 1.0),  # the space is optional
        (REASONING + "  Final: 18", "18", 1.0),  # leading indentation is fine
        # trailing whitespace and newlines still count
        (REASONING + "Final: 18   ", "18", 1.0),
        (REASONING + "Final: 18\n", "18", 1.0),
        (REASONING + "Final: 18\n\n  \n\t", "18", 1.0),
        # text after the Final line
        (REASONING + "Final: 18\nHope that helps!", "18", 0.0),
        (REASONING + "Final: 18\n.", "18", 0.0),
        # no number / not a number
        (REASONING + "Final:", "18", 0.0),
        (REASONING + "Final:   ", "18", 0.0),
        (REASONING + "Final: $18", "18", 0.0),
        (REASONING + "Final: 18 dollars", "18", 0.0),
        (REASONING + "Final: twelve", "12", 0.0),
        (REASONING + "Final: 18.", "18", 0.0),
        (REASONING + "Final: 1e3", "1000", 0.0),
        (REASONING + "Final: - 5", "-5", 0.0),
        (REASONING + "Final: 1,2345", "12345", 0.0),  # misplaced thousands comma
        (REASONING + "The answer is 18", "18", 0.0),  # no Final line at all
        ("", "18", 0.0),
        # numbers compare numerically, commas stripped
        (REASONING + "Final: 1,234.50", "1234.5", 1.0),
        (REASONING + "Final: 18.00", "18", 1.0),
        (REASONING + "Final: 18", "18.00", 1.0),
        (REASONING + "Final: 1,080", "1080", 1.0),
        (REASONING + "Final: 1080", "1,080", 1.0),
        (REASONING + "Final: 1,000,000", "1000000", 1.0),
        (REASONING + "Final: 0.5", "0.50", 1.0),
        # negative numbers
        (REASONING + "Final: -5", "-5", 1.0),
        (REASONING + "Final: -5", "5", 0.1),
        (REASONING + "Final: 5", "-5", 0.1),
        (REASONING + "Final: -1,234.5", "-1234.50", 1.0),
        # wrong numbers
        (REASONING + "Final: 19", "18", 0.1),
        (REASONING + "Final: 180", "18", 0.1),
        (REASONING + "Final: 1.8", "18", 0.1),
    ],
)
def test_gsm8k_final_reward(completion, gold, reward):
    assert gsm8k_final(completion, gold) == reward
    assert gsm8k_final(completion, gold, strict=True) == reward  # one Final line: both rules agree
    assert get_reward("gsm8k_final")(completion, gold, question="q") == reward  # extra row fields are ignored


@pytest.mark.parametrize(
    "completion, gold, seed_rule, strict",
    [
        # the seed's rule: the last line is the answer, earlier Final lines do not matter
        ("Final: 5\nMore work.\nFinal: 7", "7", 1.0, 0.0),
        ("Final: 7\nMore work.\nFinal: 5", "7", 0.1, 0.0),
        ("Final: 18\n" + REASONING + "Final: 18", "18", 1.0, 0.0),  # both agree
        (REASONING + "Final: 17\nFinal: 18", "18", 1.0, 0.0),
        # an earlier Final line does not rescue a completion that does not end with one
        ("Final: 18\n" + REASONING + "So 18.", "18", 0.0, 0.0),
    ],
)
def test_gsm8k_final_earlier_final_lines_seed_rule_and_strict(completion, gold, seed_rule, strict):
    assert gsm8k_final(completion, gold) == seed_rule
    assert gsm8k_final(completion, gold, strict=True) == strict
    assert extract_final(completion, strict=True) is None


def test_gsm8k_final_strict_option_from_a_recipe(tmp_path):
    from grouprl.run_config import build_config
    from grouprl.rewards.scorer import Scorer
    from grouprl.records import Episode, Step

    recipe = tmp_path / "r.yaml"
    recipe.write_text("task:\n  rewards:\n    - {name: gsm8k_final, options: {strict: true}}\n")
    cfg = build_config(recipe, environ={})
    ep = Episode(
        group_id=0,
        index_in_group=0,
        row={"ground_truth": "7"},
        steps=[
            Step(
                prompt_text="",
                prompt_ids=[],
                action_text="Final: 5\nMore work.\nFinal: 7",
                action_ids=[],
                truncated=False,
                anchor_state=None,
            )
        ],
    )
    spec = cfg.task.rewards[0]
    assert Scorer([spec.name], [1.0], reward_kwargs={spec.name: spec.options}).score([ep]).episode.tolist() == [0.0]
    assert Scorer([spec.name], [1.0]).score([ep]).episode.tolist() == [1.0]


@pytest.mark.parametrize(
    "completion, expected",
    [
        (REASONING + "Final: 18", "18"),
        (REASONING + "Final: 1,234.50\n", "1234.5"),
        (REASONING + "Final: -7", "-7"),
        (REASONING + "Final: 18.00", "18"),
        (REASONING + "Final: 18\nmore", None),
        ("Final: 1\nFinal: 2", "2"),  # the last line is the answer (strict: None, see above)
        (REASONING + "Final: $12", None),
        (REASONING + "Final: 12 dollars", None),
        (REASONING + "Final:", None),
    ],
)
def test_extract_final(completion, expected):
    assert extract_final(completion) == expected


def test_gold_completions_of_real_rows_earn_full_reward(gsm8k_dir):
    """The SFT target built from every row must itself satisfy the strict reward."""
    from grouprl.tasks.gsm8k import load_split

    for split in ("train", "test"):
        rows = load_split(str(gsm8k_dir), split)
        bad = [r for r in rows if gsm8k_final(r["gold_completion"], r["ground_truth"]) != 1.0]
        assert not bad, [(r["gold_completion"][-80:], r["ground_truth"]) for r in bad[:3]]


def test_format_rate_counts_the_completions_whose_final_line_parses():
    from grouprl.records import Episode, Step
    from grouprl.tasks.base import SingleTurnTask

    task = SingleTurnTask("gsm8k", [], [], None, ["gsm8k_final"], "gsm8k_final", predict=extract_final)

    def episode(text: str) -> Episode:
        return Episode(0, 0, {}, [Step("q", [1], text, [2], False, None)])

    texts = ["2 + 2 = 4\nFinal: 4", "Final: 5\nthen more", "Final: $5", "so 1,000\nFinal: 1,000", "cut mid-sen"]
    assert task.eval_metrics([episode(t) for t in texts]) == {"format_rate": 2 / 5}
    assert SingleTurnTask("x", [], [], None, [], "x").eval_metrics([episode("Final: 4")]) == {}
