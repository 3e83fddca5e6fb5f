"""The typed run state a checkpoint carries, and the view observers get instead of the trainer."""

from __future__ import annotations

import copy
import json
from dataclasses import asdict

import pytest

from grouprl.train.run_state import BestCheckpoint, RunState


def test_round_trips_through_the_checkpoint_json():
    state = RunState(
        base_model="/models/base",
        eval_before={"accuracy": 0.25, "n": 200},
        best=BestCheckpoint(50, "eval/accuracy", 0.75, "/run/checkpoint-50"),
        hub_revisions={"main": "abc"},
    )
    again = RunState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again == state and isinstance(again.best, BestCheckpoint)
    assert RunState.from_dict({}) == RunState()  # a checkpoint from before any of these was set


def test_an_unknown_field_is_one_line_naming_the_checkpoint():
    with pytest.raises(
        ValueError,
        match=r"^checkpoint run/checkpoint-3: run state has unknown field\(s\) "
        r"eval_befor; expected base_model, best, eval_before, hub_revisions$",
    ):
        RunState.from_dict({"eval_befor": {}}, where="checkpoint run/checkpoint-3")


def test_scoring_leaves_the_episodes_as_they_happened():
    """Verdicts are a record the scorer returns: scoring a batch writes nothing onto its episodes."""
    from grouprl.rewards.scorer import Scorer
    from run_helpers import one_step_episodes

    episodes = one_step_episodes(["12", "7", "boom"], truth="12")
    before = [asdict(ep) for ep in copy.deepcopy(episodes)]
    scores = Scorer(["arithmetic_exact", "arithmetic_digits"], [1.0, 1.0], "arithmetic_exact").score(episodes)
    assert [asdict(ep) for ep in episodes] == before
    assert [v.correct for v in scores.verdicts] == [True, False, False]
    assert scores.episode.tolist() == [v.score for v in scores.verdicts]
    assert [v.step_rewards for v in scores.verdicts] == [[v.score] for v in scores.verdicts]  # one step: r_0 = R
    assert asdict(scores.verdicts[0])["prediction"] is None  # this scorer was given no task parser
