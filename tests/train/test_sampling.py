"""The row sampler and the difficulty curriculum: prompts solved K/K or 0/K are skipped for a while."""

from __future__ import annotations

from grouprl.records import Episode, Step, Verdict
from grouprl.train.sampling import CurriculumSampler, RowSampler

ROWS = [{"i": i} for i in range(6)]


def outcomes(correct: list[list[bool]]) -> tuple[list[Episode], list[Verdict]]:
    step = Step(prompt_text="", prompt_ids=[], action_text="", action_ids=[], truncated=False, anchor_state=None)
    return (
        [
            Episode(group_id=g, index_in_group=k, row={}, steps=[step])
            for g, members in enumerate(correct)
            for k in range(len(members))
        ],
        [Verdict(correct=c) for members in correct for c in members],
    )


def test_curriculum_off_and_on_draw_the_same_order_until_something_is_skipped():
    plain, pool = RowSampler(ROWS, seed=4), CurriculumSampler(ROWS, seed=4, skip_steps=2, max_skipped_fraction=0.5)
    assert [r["i"] for r in plain.next(8)] == [r["i"] for r in pool.next(8)]
    assert plain.position == pool.position == 8


def test_solved_and_failed_prompts_are_skipped_for_skip_steps():
    pool = CurriculumSampler(ROWS, seed=0, skip_steps=2, max_skipped_fraction=0.5)
    order = RowSampler(ROWS, seed=0)._order(0) + RowSampler(ROWS, seed=0)._order(1)
    pool.start_step(0)
    first = [r["i"] for r in pool.next(3)]
    assert first == order[:3]
    pool.observe(*outcomes([[True, True], [True, False], [False, False]]), step=0)  # 3/3 solved, mixed, 0/K
    assert pool.skip_until == {first[0]: 3, first[2]: 3} and pool.skipped_now() == 2
    # steps 1 and 2 pass over the two skipped prompts; the sampler's position moves past them
    for step in (1, 2):
        pool.start_step(step)
        drawn = [r["i"] for r in pool.next(4)]
        assert first[0] not in drawn and first[2] not in drawn
    assert pool.skipped_draws > 0
    pool.start_step(3)  # skip_steps over: back in the pool
    assert pool.skipped_now() == 0 and pool.skip_until == {}
    assert pool.metrics() == {"curriculum/skipped_prompts": 0.0, "curriculum/skipped_draws": float(pool.skipped_draws)}


def test_never_skips_more_than_the_allowed_share_and_state_round_trips():
    pool = CurriculumSampler(ROWS, seed=1, skip_steps=5, max_skipped_fraction=0.34)  # at most 2 of 6
    pool.start_step(0)
    pool.next(4)
    pool.observe(*outcomes([[True, True]] * 4), step=0)
    assert pool.skipped_now() == 2
    pool.next(10)  # terminates: 4 prompts stay drawable
    copy = CurriculumSampler(ROWS, seed=1, skip_steps=5, max_skipped_fraction=0.34, position=pool.position)
    copy.load_state_dict(pool.state_dict())
    assert (copy.skip_until, copy.now, copy.skipped_draws) == (pool.skip_until, pool.now, pool.skipped_draws)
    assert [r["i"] for r in copy.next(7)] == [r["i"] for r in pool.next(7)]
