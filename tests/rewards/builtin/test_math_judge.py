"""math-verify runs in a worker process that the budget kills: no cooperation needed from the reward.

The stuck worker is a real process stopped with SIGSTOP (as a worker computing in C with the GIL
held is, to its caller): the call returns within its budget, scores as not correct, the worker is
gone, and the next call gets a fresh one."""

from __future__ import annotations

import os
import signal
import time

from grouprl.rewards.builtin import math_judge


def test_a_worker_that_never_answers_is_killed_within_the_budget():
    assert math_judge.judge("\\boxed{3}", "3", 1).correct  # a worker is up and idle
    stuck = math_judge._idle[-1]
    os.kill(stuck.pid, signal.SIGSTOP)
    start = time.monotonic()
    verdict = math_judge.judge("\\boxed{3}", "3", 1)
    took = time.monotonic() - start
    assert not verdict.correct and "did not finish within 4s" in verdict.note
    assert 3.5 < took < 8, took
    assert stuck.poll() is not None  # killed, not left behind
    assert math_judge.judge("\\boxed{\\frac{1}{2}}", "0.5", 1).correct  # a fresh worker serves the next call


def test_unparsable_gold_is_no_opinion_and_a_usable_one_is_found():
    assert math_judge.judge("\\boxed{3}", "banana", 1).gold is None
    assert math_judge.gold_parses("#### 72") and not math_judge.gold_parses("banana")
