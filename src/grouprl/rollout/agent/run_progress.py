"""An agent run's progress counted in episodes, for ``SamplingParams.progress(done, total, tokens)``.

The decode loop reports per generate call (rows finished in that call, its rows, its tokens). For a run of
episodes played in one batch that is the run's progress; for agents it says nothing: the endpoint's every call is
one turn of whichever agents were waiting, so an evaluation read "49/200 prompts" and then "0/200" again, and a
rate of 0-1 tokens/s. Here ``done`` is the episodes whose agent has returned (or failed), and ``tokens`` the tokens
generated over every call so far.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Callable

from grouprl.rollout.sampling import SamplingParams


class RunProgress:
    def __init__(self, report: Callable[[int, int, int], None], total: int):
        self.report, self.total = report, total
        self.done = self.banked = self._in_call = 0
        self._lock = threading.Lock()  # the agents' event loop ends episodes; the batcher's thread generates

    def call_params(self, params: SamplingParams) -> SamplingParams:
        """``params`` for one generate call of the endpoint: its decode steps report into the run's count."""
        return dataclasses.replace(params, progress=self._during_call)

    def call_ended(self) -> None:
        with self._lock:
            self.banked, self._in_call = self.banked + self._in_call, 0

    def episode_ended(self) -> None:
        with self._lock:
            self.done += 1
            self._emit()

    def _during_call(self, _finished: int, _rows: int, tokens: int) -> None:
        with self._lock:
            self._in_call = tokens
            self._emit()

    def _emit(self) -> None:
        self.report(min(self.done, self.total), self.total, self.banked + self._in_call)
