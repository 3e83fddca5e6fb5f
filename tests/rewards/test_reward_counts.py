"""A batch reward must return one result per sample: any other count is that call's error, naming
the reward (never a shifted, partial or silently accepted score)."""

from __future__ import annotations

import textwrap

import pytest

from grouprl.rewards.kit import RewardFunctionError, reward_function, score_batch
from grouprl.records import EvaluateResult
from grouprl.rewards.scorer import Scorer
from run_helpers import one_step_episodes

REWARDS = textwrap.dedent("""
    from grouprl.records import EvaluateResult
    from grouprl.rewards.kit import reward_function

    @reward_function(mode="batch")
    def one_for_all(rollouts_messages, ground_truths=None, **kwargs):
        return [EvaluateResult(score=1.0)]

    @reward_function(mode="batch")
    def one_too_many(rollouts_messages, ground_truths=None, **kwargs):
        return [EvaluateResult(score=1.0)] * (len(rollouts_messages) + 1)

    @reward_function(mode="batch")
    def not_a_list(rollouts_messages, ground_truths=None, **kwargs):
        return EvaluateResult(score=1.0)

    @reward_function(mode="batch")
    def floats(rollouts_messages, ground_truths=None, **kwargs):
        return [1.0] * len(rollouts_messages)

    @reward_function(mode="batch")
    def honest(rollouts_messages, ground_truths=None, **kwargs):
        return [EvaluateResult(score=0.5) for _ in rollouts_messages]
""")


@pytest.mark.parametrize(
    "name, found",
    [
        ("one_for_all", "1 result(s) for 16"),
        ("one_too_many", "17 result(s) for 16"),
        ("not_a_list", "returned EvaluateResult for 16"),
        ("floats", "returned float"),
    ],
)
def test_a_wrong_count_fails_every_sample_of_the_call_naming_the_reward(tmp_path, name, found):
    path = tmp_path / "counts.py"
    path.write_text(REWARDS)
    episodes = one_step_episodes([str(i) for i in range(16)])
    scores = Scorer([f"{path}:{name}", f"{path}:honest"], [1.0, 1.0], normalize_weights=False).score(episodes)
    assert scores.metrics["reward_errors"] == 16.0
    for v in scores.verdicts:
        assert v.parts[f"{path}:{name}"] is None
        assert v.parts[f"{path}:honest"] == 0.5  # the other reward is untouched
        assert len(v.errors) == 1 and f"'{name}'" in v.errors[0] and found in v.errors[0]


def test_a_wrong_count_is_refused_by_score_batch_itself():
    @reward_function(mode="batch", id="short")
    def short(rollouts_messages, ground_truths=None, **kwargs):
        return [EvaluateResult(score=1.0)] * 2

    with pytest.raises(RewardFunctionError, match="reward 'short' .batch. returned 2 result.s. for 3 samples"):
        score_batch(short, [[{"role": "assistant", "content": "a"}]] * 3)
