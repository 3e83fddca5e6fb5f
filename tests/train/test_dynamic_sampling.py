"""Dynamic sampling on hand-made rounds: which groups are kept, how many rounds run, what is logged,
and how kept groups are shared out between processes (a group never spans two)."""

from __future__ import annotations

from grouprl.records import Episode, Step, Verdict
from grouprl.rewards.scorer import Scores
from grouprl.train.dynamic_sampling import DynamicSampler, group_agrees
from grouprl.train.parallel import DataParallel, GlobalBatch, ProcessInfo

K = 2


def episode(group: int, k: int, tag: str) -> Episode:
    step = Step(prompt_text="", prompt_ids=[1], action_text=tag, action_ids=[2], truncated=False, anchor_state=None)
    return Episode(group_id=group, index_in_group=k, row={"tag": tag}, steps=[step])


def round_of(groups: list[list[tuple[float, bool]]], tag: str):
    """One gathered round: group g's members (score, correct)."""
    eps = [episode(g, k, f"{tag}{g}") for g, members in enumerate(groups) for k in range(len(members))]
    verdicts = [Verdict(score=s, correct=c) for members in groups for s, c in members]
    return GlobalBatch(eps, 0, len(eps)), Scores.of(verdicts, None, {"reward_errors": 1.0})


# a format bonus makes scores differ inside a group that the judge finds all wrong: no task signal
ALL_WRONG_WITH_BONUS = [(0.1, False), (0.0, False)]
MIXED = [(1.0, True), (0.0, False)]
ALL_RIGHT = [(1.0, True), (1.0, True)]


def test_judge_not_the_shaped_score_decides():
    members = round_of([ALL_WRONG_WITH_BONUS], "a")[1].verdicts
    assert group_agrees(members, "judge") and not group_agrees(members, "score")


def test_rounds_until_full_and_what_is_logged():
    rounds = iter(
        [
            round_of([MIXED, ALL_RIGHT, ALL_WRONG_WITH_BONUS], "a"),
            round_of([ALL_RIGHT, MIXED, MIXED], "b"),
            round_of([MIXED] * 3, "c"),
        ]
    )
    sampler = DynamicSampler("judge", max_batches=5, batch_size=3, parallel=DataParallel())
    batch, scores = sampler.collect(lambda: next(rounds))
    # round a keeps a0, round b keeps b1 and b2: full after two rounds, round c never generated
    assert [ep.row["tag"] for ep in batch.episodes][::K] == ["a0", "b1", "b2"]
    assert [ep.group_id for ep in batch.episodes] == [0, 0, 1, 1, 2, 2]  # renumbered, whole groups
    assert (batch.start, batch.stop) == (0, 6) and scores.episode.tolist() == [1.0, 0.0] * 3
    assert [v.correct for v in scores.verdicts] == [True, False] * 3  # each kept episode keeps its own verdict
    m = scores.metrics
    assert m["dynamic_sampling/batches"] == 2 and m["dynamic_sampling/groups_kept"] == 3
    assert m["dynamic_sampling/groups_dropped"] == 3
    assert m["dynamic_sampling/zero_variance_fraction"] == 3 / 6  # a1, a2 (judge), b0
    assert m["frac_reward_zero_std"] == 2 / 6  # by score, as before dynamic sampling: a1, b0
    assert m["reward_errors"] == 2.0  # both rounds' errors counted
    assert next(rounds)[0].episodes[0].row["tag"] == "c0"


def test_max_batches_trains_on_what_it_has_and_score_metric():
    rounds = iter([round_of([MIXED, ALL_RIGHT], "a"), round_of([ALL_WRONG_WITH_BONUS, ALL_RIGHT], "b")])
    batch, scores = DynamicSampler("judge", 2, 2, DataParallel()).collect(lambda: next(rounds))
    assert [ep.row["tag"] for ep in batch.episodes][::K] == ["a0"]
    assert scores.metrics["dynamic_sampling/groups_kept"] == 1 and scores.metrics["dynamic_sampling/batches"] == 2
    rounds = iter([round_of([MIXED, ALL_WRONG_WITH_BONUS], "a")])
    batch, _ = DynamicSampler("score", 1, 2, DataParallel()).collect(lambda: next(rounds))
    assert [ep.row["tag"] for ep in batch.episodes][::K] == ["a0", "a1"]  # score variance counts here


def test_nothing_disagrees_trains_on_the_last_batch_unchanged():
    rounds = iter([round_of([ALL_RIGHT, ALL_RIGHT], "a"), round_of([ALL_RIGHT, ALL_RIGHT], "b")])
    batch, scores = DynamicSampler("judge", 2, 2, DataParallel()).collect(lambda: next(rounds))
    assert [ep.row["tag"] for ep in batch.episodes][::K] == ["b0", "b1"]
    assert scores.metrics["dynamic_sampling/groups_kept"] == 0


def test_two_processes_get_whole_groups_and_the_same_count():
    """Rank 1 of 2: 3 kept groups are cut to 2 (an even split), rank 1 trains the second one, whole."""
    rounds = iter([round_of([MIXED, MIXED, ALL_RIGHT, MIXED], "a")])
    parallel = DataParallel(info=ProcessInfo(rank=1, world_size=2))
    batch, scores = DynamicSampler("judge", 1, 4, parallel).collect(lambda: next(rounds))
    assert [ep.row["tag"] for ep in batch.episodes][::K] == ["a0", "a1"]
    assert [ep.row["tag"] for ep in batch.local] == ["a1", "a1"]
    assert (
        scores.metrics["dynamic_sampling/groups_kept"] == 2 and scores.metrics["dynamic_sampling/groups_dropped"] == 2
    )
