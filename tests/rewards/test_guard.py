"""A reward that blocks must not hang the run: every reward call has ``reward_timeout`` seconds.

Real runs with a real blocking reward (it sleeps for an hour), in-process and typed.
"""

from __future__ import annotations

import time

import pytest

from run_helpers import rows, train, user_file

BLOCKING_PLAIN = "import time\ndef fn(completion, ground_truth, **kw):\n    time.sleep(3600)\n"
BLOCKING_TYPED = (
    "import threading\nfrom grouprl.rewards.kit import reward_function\n"
    "@reward_function(mode='batch')\ndef fn(rollouts_messages, ground_truths=None, **kw):\n"
    "    threading.Event().wait()\n"
)


def test_blocking_in_process_reward_times_out_and_the_run_finishes(tiny_arithmetic_dir, tmp_path):
    for name, body in (("plain.py", BLOCKING_PLAIN), ("typed.py", BLOCKING_TYPED)):
        reward = user_file(tmp_path, name, body)
        out = tmp_path / name.removesuffix(".py")
        start = time.monotonic()
        rc = train(
            tiny_arithmetic_dir,
            out,
            "--rewards",
            f"{reward}:fn",
            "arithmetic_digits",
            "--reward_timeout",
            "1",
            "--max_reward_error_fraction",
            "1.0",
        )
        elapsed = time.monotonic() - start
        assert rc == 0 and elapsed < 60, (name, elapsed)
        metrics = rows(out / "metrics.jsonl")[0]
        records = rows(out / "rollouts" / "rollouts.jsonl")
        assert metrics["reward_errors"] == len(records) == 8
        assert all(any("reward_timeout=1" in e for e in r["reward_errors"]) for r in records)
        assert all(r["rewards"]["arithmetic_digits"] is not None for r in records)  # the other reward still scores


def test_blocking_reward_past_the_budget_stops_the_run(tiny_arithmetic_dir, tmp_path, capsys):
    reward = user_file(tmp_path, "plain.py", BLOCKING_PLAIN)
    rc = train(tiny_arithmetic_dir, tmp_path / "run", "--rewards", f"{reward}:fn", "--reward_timeout", "0.5")
    assert rc == 1
    err = capsys.readouterr().err
    assert "run stopped" in err and "plain.py:fn" in err and "reward_timeout=0.5" in err


def test_calls_share_a_worker_thread_until_one_hangs():
    import threading

    from grouprl.rewards import guard
    from grouprl.rewards.guard import RewardTimeout, call_with_timeout

    def where(x):
        return threading.current_thread().ident, x * 2

    first = [call_with_timeout(where, 5.0, i) for i in range(3)]
    assert [v for _, v in first] == [0, 2, 4]
    assert len({t for t, _ in first}) == 1 and first[0][0] != threading.get_ident()  # one worker, not the caller
    release = threading.Event()
    before = guard.ABANDONED
    with pytest.raises(RewardTimeout):
        call_with_timeout(release.wait, 0.2, 30, name="stuck")
    assert guard.ABANDONED == before + 1
    after, value = call_with_timeout(where, 5.0, 21)
    assert value == 42 and after != first[0][0]  # the stuck worker is left alone; a fresh one serves
    with pytest.raises(ValueError, match="bad"):
        call_with_timeout(lambda: (_ for _ in ()).throw(ValueError("bad")), 5.0)  # errors reach the caller
    release.set()
    guard.ABANDONED = before  # the hung call has returned; do not leak the count into other tests


def test_a_batch_of_calls_takes_one_hand_off_and_keeps_a_budget_per_call():
    import threading

    from grouprl.rewards import guard
    from grouprl.rewards.guard import RewardTimeout, map_with_timeout

    def slow_double(x, delay=0.0):
        time.sleep(delay)
        if x < 0:
            raise ValueError("negative")
        return threading.current_thread().ident, 2 * x

    # Five calls of 0.15 s each: 0.75 s in all, past a 0.4 s budget, but no single call is.
    results = map_with_timeout(slow_double, 0.4, [((i,), {"delay": 0.15}) for i in range(5)])
    assert [v[1] for v, e in results] == [0, 2, 4, 6, 8] and all(e is None for _, e in results)
    assert len({v[0] for v, _ in results}) == 1 and results[0][0][0] != threading.get_ident()
    ((_, err),) = map_with_timeout(slow_double, 0.4, [((-1,), {})])
    assert isinstance(err, ValueError)  # an error is that call's, the others go on
    with pytest.raises(SystemExit):  # not an ordinary error: it reaches the caller, as without a budget
        map_with_timeout(lambda: (_ for _ in ()).throw(SystemExit(3)), 5.0, [((), {})])
    release = threading.Event()
    before = guard.ABANDONED
    results = map_with_timeout(
        lambda x: x if x != 2 else release.wait(30), 0.2, [((i,), {}) for i in range(4)], name="stuck"
    )
    assert [v for v, _ in results[:2]] == [0, 1]
    assert all(isinstance(e, RewardTimeout) and "stuck" in str(e) for _, e in results[2:])  # stuck one + untried
    assert guard.ABANDONED == before + 1
    release.set()
    guard.ABANDONED = before
