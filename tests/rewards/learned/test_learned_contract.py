"""A learned reward below a plain reward's contract: NaN/inf is a counted error of its episode (finite scores,
valid JSON, a finite mixer), an exception or a hang past reward_timeout an error of each episode, and a wrong
count or type one line naming it."""

from __future__ import annotations

import json
import math
import time

import pytest

from grouprl.rewards.guard import RewardFailure
from grouprl.rewards.learned.checked_scores import LearnedRewardError
from grouprl.rewards.learned.mixer import LearnableMixer
from grouprl.rewards.scorer import Scorer
from run_helpers import one_step_episodes


class Learned:
    """A learned reward whose score() returns what the test gives it (or sleeps, or raises)."""

    def __init__(self, values=None, sleep: float = 0.0, error: Exception | None = None):
        self.name, self.frozen, self.values, self.sleep, self.error, self.updates = (
            "critic",
            False,
            values,
            sleep,
            error,
            0,
        )

    def score(self, episodes):
        if self.sleep:
            time.sleep(self.sleep)
        if self.error is not None:
            raise self.error
        return self.values

    def update(self, episodes):
        self.updates += 1
        return {"critic/updates": float(self.updates)}

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


@pytest.fixture()
def plain_reward(tmp_path):
    path = tmp_path / "plain.py"
    path.write_text("def one(completion, ground_truth, **row):\n    return 1.0\n")
    return f"{path}:one"


def score(plain_reward, learned, **kw):
    episodes = one_step_episodes(["1", "2", "3", "4"], truth="1", question="0+1")
    scorer = Scorer([plain_reward], [1.0], learned=[learned], learned_weights=[0.5], **kw)
    return scorer.score(episodes)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_learned_score_is_a_counted_error(plain_reward, bad):
    scores = score(
        plain_reward,
        Learned(
            [0.2, bad, 0.4, None],
        ),
        mixer=LearnableMixer(),
    )
    assert scores.metrics["reward_errors"] == 1.0 and scores.metrics["reward_error_fraction"] == 0.25
    assert "critic" in scores.verdicts[1].errors[0] and "non-finite" in scores.verdicts[1].errors[0]
    assert not scores.verdicts[3].errors  # None: no opinion, no error
    assert all(math.isfinite(v.score) for v in scores.verdicts)
    assert scores.verdicts[1].parts["critic"] is None and scores.verdicts[0].parts["critic"] == 0.2
    json.dumps(scores.metrics, allow_nan=False)  # today: NaN in grail/alpha and the scores -> invalid JSON
    assert math.isfinite(scores.metrics["grail/alpha"])


def test_the_error_fraction_rule_applies(plain_reward):
    with pytest.raises(RewardFailure, match="2 of 4 samples"):
        score(plain_reward, Learned([float("nan"), float("nan"), 0.1, 0.1]), max_error_fraction=0.25)


def test_an_exception_is_an_error_of_each_episode(plain_reward):
    scores = score(plain_reward, Learned(error=RuntimeError("critic weights missing")))
    assert scores.metrics["reward_errors"] == 4.0
    assert scores.verdicts[0].errors == ["critic: RuntimeError: critic weights missing"]
    assert [v.score for v in scores.verdicts] == [1.0] * 4  # the base score stands


def test_a_hang_has_the_reward_timeout_budget(plain_reward):
    start = time.monotonic()
    scores = score(plain_reward, Learned([0.1] * 4, sleep=30.0), reward_timeout=1.0)
    assert time.monotonic() - start < 10
    assert scores.metrics["reward_errors"] == 4.0 and "critic" in scores.verdicts[0].errors[0]


@pytest.mark.parametrize(
    "values, said",
    [
        ([0.1, 0.2], "returned 2 scores for 4 episodes"),
        ({"a": 1}, "returned dict; expected a list of 4 floats"),
        ([0.1, "high", 0.2, 0.3], "returned str 'high' for episode 1; expected a float or None"),
    ],
)
def test_a_wrong_count_or_type_is_one_line(plain_reward, values, said):
    with pytest.raises(LearnedRewardError) as info:
        score(plain_reward, Learned(values))
    assert said in str(info.value) and "learned reward 'critic'" in str(info.value) and "\n" not in str(info.value)
