"""Guards around every reward call: a time budget, and finite numbers only.

A reward function is adversarial input: it may block forever (a lock, a network call, an
endless loop) or return NaN, ±inf or a non-number. Neither may reach the advantages:

* ``call_with_timeout`` runs the call in a worker thread (kept between calls) and gives up after ``timeout_s``; the
  samples of that call become errors. Python cannot kill a thread, so a call that never returns
  keeps its (daemon) thread; ``ABANDONED`` counts them, and past ``MAX_ABANDONED`` the run stops
  (each one may hold a CPU or memory).
* ``finite_score`` turns a value into a float or an error text naming the reward.
"""

from __future__ import annotations

import math
import queue
import threading
from typing import Any, Callable

#: Calls that outlived their budget and still run in a daemon thread (a metric).
ABANDONED = 0
MAX_ABANDONED = 32
_lock = threading.Lock()


class RewardTimeout(TimeoutError):
    """A reward call did not return within ``reward_timeout`` seconds."""


class TooManyStuckRewards(RuntimeError):
    """So many reward calls are stuck that the run cannot go on safely."""


class _Worker:
    """One daemon thread that runs calls handed to it, one at a time. A thread per call cost about
    0.1 ms, i.e. 16 ms of a 250 ms tiny step with 128 per-sample reward calls."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="reward-worker", daemon=True).start()

    def _loop(self) -> None:
        while True:
            fn, args, kwargs, box, done = self.jobs.get()
            try:
                box["value"] = fn(*args, **kwargs)
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
                box["error"] = err
            finally:
                done.set()


_workers = threading.local()  # each calling thread its own worker: calls never queue behind another's


def _own_worker() -> _Worker:
    """The calling thread's worker (a fresh one after the last was abandoned)."""
    worker = getattr(_workers, "worker", None) or _Worker()
    _workers.worker = worker
    return worker


def call_with_timeout(fn: Callable[..., Any], timeout_s: float | None, *args, name: str = "reward", **kwargs) -> Any:
    """``fn(*args, **kwargs)``, or ``RewardTimeout`` after ``timeout_s`` (None or <= 0: no budget)."""
    if not timeout_s or timeout_s <= 0:
        return fn(*args, **kwargs)
    box: dict[str, Any] = {}
    done = threading.Event()
    _own_worker().jobs.put((fn, args, kwargs, box, done))
    if not done.wait(timeout_s):
        raise _abandon_worker(name, timeout_s)
    if "error" in box:
        raise box["error"]
    return box["value"]


def map_with_timeout(
    fn: Callable[..., Any], timeout_s: float | None, calls: list[tuple[tuple, dict]], name: str = "reward"
) -> list[tuple[Any, BaseException | None]]:
    """``fn(*args, **kwargs)`` for every ``(args, kwargs)`` of ``calls``, as ``(value, None)`` or
    ``(None, error)`` each. The calls run one after another in one job of the worker thread (one
    hand-off per batch instead of one per sample: 128 per-sample hand-offs cost 2-10 ms of a tiny
    step), and each call still has its own budget: the clock restarts whenever a call returns. A
    call past its budget and every call after it (not tried) get the same ``RewardTimeout``."""
    if not timeout_s or timeout_s <= 0:
        return [_attempt(fn, args, kwargs, Exception) for args, kwargs in calls]
    results: list[tuple[Any, BaseException | None]] = []
    progress = threading.Condition()

    def job() -> None:
        for args, kwargs in calls:
            result = _attempt(fn, args, kwargs, BaseException)  # SystemExit too: re-raised below, not lost
            with progress:
                results.append(result)
                progress.notify()

    _own_worker().jobs.put((job, (), {}, {}, threading.Event()))
    with progress:
        while len(results) < len(calls):
            n = len(results)
            if not progress.wait_for(lambda: len(results) > n, timeout_s):
                return results[:n] + [(None, _abandon_worker(name, timeout_s))] * (len(calls) - n)
        done = list(results)
    for _, err in done:  # as an unbudgeted call would: only ordinary exceptions are a sample's error
        if err is not None and not isinstance(err, Exception):
            raise err
    return done


def _attempt(
    fn: Callable[..., Any], args: tuple, kwargs: dict, catch: type[BaseException]
) -> tuple[Any, BaseException | None]:
    try:
        return fn(*args, **kwargs), None
    except catch as err:  # noqa: BLE001 - the caller decides what a failing sample is
        return None, err


def _abandon_worker(name: str, timeout_s: float) -> RewardTimeout:
    """This thread's worker is stuck inside a call for good: the next call gets a fresh one. The
    timeout to report, or ``TooManyStuckRewards`` past ``MAX_ABANDONED`` stuck calls."""
    global ABANDONED
    _workers.worker = None
    with _lock:
        ABANDONED += 1
        stuck = ABANDONED
    if stuck > MAX_ABANDONED:
        raise TooManyStuckRewards(f"{stuck} reward calls never returned (last: {name}); stopping the run")
    return RewardTimeout(f"{name}: no result within reward_timeout={timeout_s:g}s")


def finite_score(name: str, value: Any) -> tuple[float | None, str | None]:
    """(score, None) for a finite real number or None (no opinion); else (None, error naming ``name``)."""
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        return None, f"{name}: returned {type(value).__name__} {_short(value)}; expected a float or None"
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError) as err:
        return None, f"{name}: returned {_short(value)} ({err}); expected a float or None"
    if not math.isfinite(number):
        return None, f"{name}: returned a non-finite score ({number}); expected a finite float or None"
    if abs(number) > MAX_ABS_SCORE:
        return None, f"{name}: returned {number:g}, beyond +-{MAX_ABS_SCORE:g}; expected a score of sane magnitude"
    return number, None


# A score past this is an error, not a reward: a group's statistics are taken in float64, and the square of a
# score past ~1e154 is inf there (a 1e300 reward made reward_std Infinity and zeroed its group's advantages
# silently). Huge scores below it (1e39: past float32's range) still give advantages (test_nonfinite_runs.py).
MAX_ABS_SCORE = 1e150


def _short(value: Any, n: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


class RewardFailure(RuntimeError):
    """More of a batch's samples failed in reward functions than the run allows."""
