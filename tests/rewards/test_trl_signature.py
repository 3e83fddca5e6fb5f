"""Rewards in TRL's / open-r1's signature run unchanged and receive every dataset column by name."""

from __future__ import annotations

import math
import textwrap

import pytest

from grouprl.records import Episode, Step
from grouprl.rewards.scorer import Scorer
from grouprl.rewards.trl_signature import takes_trl_signature

REWARD_FILE = textwrap.dedent('''
    def keyword_hit(completions, keyword, **kwargs):
        """TRL signature: 1.0 when the completion contains the row's `keyword` column."""
        return [1.0 if kw in c[0]["content"] else 0.0 for c, kw in zip(completions, keyword)]

    def accuracy_reward(completions, solution, **kwargs):
        """open-r1's shape: reads `solution`; None = no opinion."""
        return [None if s == "?" else float(c[0]["content"].strip() == s) for c, s in zip(completions, solution)]

    def sees(prompts, completions, **kwargs):
        seen.append({"prompts": prompts, "kwargs": sorted(kwargs)})
        return [0.5] * len(completions)

    def exact(completions, ground_truth):
        """No **kwargs: names the answer column the way TRL users write it."""
        return [float(c[0]["content"] == g) for c, g in zip(completions, ground_truth)]

    def broken(completions, **kwargs):
        return [float("nan")] * len(completions)

    def short(completions, **kwargs):
        return []

    seen = []
''')


def episode(group: int, row: dict, completion: str) -> Episode:
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": row["question"]}]
    step = Step(
        prompt_text="p",
        prompt_ids=[1],
        action_text=completion,
        action_ids=[2],
        truncated=False,
        anchor_state=None,
        messages=messages,
    )
    return Episode(group_id=group, index_in_group=0, row=row, steps=[step])


@pytest.fixture()
def reward_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARD_FILE)
    return path


def rows():
    return [
        {"question": "capital of France?", "keyword": "Paris", "solution": "Paris", "ground_truth": "Paris"},
        {"question": "2+2?", "keyword": "4", "solution": "?", "ground_truth": "?"},
    ]


def test_signature_detection():
    def trl(completions, **kwargs): ...
    def trl_prompts(prompts, completions, **kwargs): ...
    def plain(completion, ground_truth, **kwargs): ...

    assert takes_trl_signature(trl) and takes_trl_signature(trl_prompts) and not takes_trl_signature(plain)


def test_trl_rewards_read_columns_by_name(reward_file):
    eps = [episode(0, rows()[0], "It is Paris"), episode(1, rows()[1], "5")]
    names = [f"{reward_file}:keyword_hit", f"{reward_file}:accuracy_reward"]
    v = Scorer(names, [1.0, 1.0], normalize_weights=False).score(eps).verdicts
    assert v[0].parts == {names[0]: 1.0, names[1]: 0.0}  # "It is Paris" != "Paris" exactly
    assert v[1].parts == {names[0]: 0.0, names[1]: None}  # None: no opinion, left out of the sum
    assert v[0].score == 1.0 and v[1].score == 0.0 and not v[0].errors


def test_prompts_and_columns_reach_the_function(reward_file):
    import sys

    eps = [episode(0, rows()[0], "x")]
    name = f"{reward_file}:sees"
    Scorer([name], [1.0]).score(eps)
    module = next(
        m
        for k, m in sys.modules.items()
        if k.startswith("grouprl_user_reward_") and getattr(m, "__file__", None) == str(reward_file)
    )
    call = module.seen[-1]
    assert call["prompts"] == [
        [{"role": "system", "content": "sys"}, {"role": "user", "content": "capital of France?"}]
    ]
    assert call["kwargs"] == ["keyword", "question", "solution"]  # columns; not grouprl's group_ids


def test_non_finite_and_wrong_length_are_errors_not_scores(reward_file):
    eps = [episode(0, rows()[0], "x"), episode(1, rows()[1], "y")]
    names = [f"{reward_file}:broken", f"{reward_file}:short"]
    v = Scorer(names, [1.0, 1.0], max_error_fraction=1.0).score(eps).verdicts
    assert v[0].parts == {names[0]: None, names[1]: None}
    assert any("non-finite nan" in e for e in v[0].errors)
    assert any("expected a list of 1 numbers" in e for e in v[0].errors)  # per sample after the batch
    assert not math.isnan(v[0].score)


def test_a_trl_reward_can_be_the_judge_of_correctness(reward_file):
    eps = [episode(0, rows()[0], "Paris"), episode(1, rows()[0], "Lyon"), episode(2, rows()[1], "4")]
    names = [f"{reward_file}:keyword_hit", f"{reward_file}:accuracy_reward"]
    v = Scorer(names, [1.0, 1.0], correct_reward=names[1]).score(eps).verdicts
    assert [x.correct for x in v] == [True, False, False]  # the last: None (no opinion) is not correct


def test_typed_rewards_get_the_columns_too():
    from grouprl.records import EvaluateResult
    from grouprl.rewards import registry
    from grouprl.rewards.kit import reward_function

    @reward_function(id="keyword_typed")
    def keyword_typed(messages, ground_truth=None, keyword=None, **kwargs):
        return EvaluateResult(score=float(keyword in messages[-1].content))

    registry.REWARDS["keyword_typed"] = keyword_typed
    try:
        eps = [episode(0, rows()[0], "Paris!"), episode(1, rows()[1], "five")]
        v = Scorer(["keyword_typed"], [1.0]).score(eps).verdicts
    finally:
        registry.REWARDS.pop("keyword_typed")
    assert [x.parts["keyword_typed"] for x in v] == [1.0, 0.0]


def test_a_trl_reward_reads_the_answer_column_by_name(reward_file):
    eps = [episode(0, rows()[0], "Paris"), episode(1, rows()[0], "Lyon")]
    name = f"{reward_file}:exact"
    v = Scorer([name], [1.0]).score(eps).verdicts
    assert [x.parts[name] for x in v] == [1.0, 0.0] and not v[0].errors
