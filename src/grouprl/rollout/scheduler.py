"""The rollout scheduler: the loop asks it for the next batch of finished groups and does not know which
scheduler it has.

- ``SyncScheduler`` (``rollout_mode: sync``): the learner's own thread generates and scores the batch when
  it asks: the plain loop, bit for bit.
- ``AsyncScheduler`` (``one_step_off``, ``async``): producer threads draw rows, generate them with the
  generator's copy of the weights (``rollout/weight_sync.py``) and score them, off the learner's critical
  path, into a bounded buffer the learner takes batches from in stream order.

The staleness bound. Batch ``m`` (0, 1, ... in stream order) may start only once the learner has asked
for batch ``m - max_staleness`` (``m < requested + max_staleness``). The generator holds the weights of
every update before that request, and at most ``max_staleness`` more updates happen before batch ``m`` is
taken, so no token of it lags the trained weights by more than ``max_staleness`` versions. This needs the
push of every update before that request to reach batch ``m``'s generate calls: the trainer pushes
(``after_update``) before it asks for its next batch (``next_batch``, on the same thread), and an ``hf``
push, which only stages the weights (``weight_sync.py``), is installed at the start of the next generate
call, and batch ``m``'s calls all begin after its claim. ``one_step_off`` is one worker with
``max_staleness = 1``: batch t+1 is generated while the learner trains on batch t.

Failures are never a hang: a worker's exception reaches the learner at the batch it was making (with the
batch number), and a learner that waits longer than ``timeout`` seconds for a batch stops with a clear
error (``RolloutTimeout``). Collectives never run here: the caller gathers on its own thread.

Stopping. ``close`` drops the batches in flight, but waits until no producer is inside the model: a
producer sees the stop at its next generate call (``_Stoppable``: a conversation's next turn, a batch's next
chunk), raises ``ProducerStopped`` there, and exits. A daemon thread still in torch's C++ code when the
interpreter shuts down aborts the whole process ("terminate called without an active exception", exit 134)
after a run that had finished: an async run whose episodes wait on a tool kept a producer mid-conversation
when the learner took its last batch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grouprl.records import Episode
from grouprl.rollout.weight_sync import GeneratorCopy

log = logging.getLogger(__name__)


@dataclass
class Drawn:
    """The rows of one batch, where its groups are numbered from, and the data position after them."""

    rows: list[dict[str, Any]]
    first_group: int
    data_position: int


@dataclass
class Produced:
    """One finished batch: this process's episodes, their scores, and what making them cost."""

    index: int  # its place in the stream
    episodes: list[Episode]
    scores: Any  # the scorer's Scores
    data_position: int  # the row sampler's position after this batch's rows (what a checkpoint keeps)
    seconds: dict[str, float] = field(default_factory=dict)  # the learner's: generation/score time, or its wait
    producer_seconds: dict[str, float] = field(default_factory=dict)  # async: the producer's, off the learner's path


Draw = Callable[[int], Drawn]  # batch index -> its rows (called in stream order)
Produce = Callable[[Drawn, Any], tuple[list[Episode], Any, dict[str, float]]]  # (drawn, backend) -> made


class RolloutTimeout(RuntimeError):
    """The learner waited longer than ``rollout_timeout`` for a batch (a hung episode, tool or judge)."""


class RolloutProducerError(RuntimeError):
    """A producer worker raised while making a batch; the learner stops with its error, in the same one line
    the synchronous run prints for it (the cause's own message, then where it happened) and its exit code."""

    def __init__(self, cause: BaseException, batch: int):
        text = str(cause).strip() or type(cause).__name__
        super().__init__(f"{text} (in the rollout producer, batch {batch}; {type(cause).__name__})")
        self.cause, self.batch = cause, batch
        self.exit_code = int(getattr(cause, "exit_code", 1))


class ProducerStopped(Exception):
    """Raised in a producer at its next generate call after ``close``: the batch in flight is dropped."""


class _Stoppable:
    """The generator as a producer sees it: ``generate`` refuses once the scheduler is stopping; anything
    else is the generator's own."""

    def __init__(self, generator: GeneratorCopy, stopping: Callable[[], bool]):
        self._generator, self._stopping = generator, stopping

    def generate(self, prompt_ids, params):
        if self._stopping():
            raise ProducerStopped("the scheduler is closing")
        return self._generator.generate(prompt_ids, params)

    def __getattr__(self, name: str):
        return getattr(self._generator, name)


class SyncScheduler:
    """Generate and score when asked, on the caller's thread, with the trainer's own backend."""

    mode = "sync"

    def __init__(self, draw: Draw, produce: Produce, backend: Any, position: Callable[[], int]):
        self.draw, self.produce, self.backend, self._position = draw, produce, backend, position
        self.evaluation_backend = backend  # what the learner's thread evaluates with

    @property
    def data_position(self) -> int:
        return self._position()

    def next_batch(self, round_index: int) -> Produced:
        drawn = self.draw(round_index)
        episodes, scores, seconds = self.produce(drawn, self.backend)
        return Produced(round_index, episodes, scores, drawn.data_position, seconds)

    def after_update(self, model, version: int) -> float:
        self.backend.load_weights(model)  # engines with their own weight copy take the new ones
        return 0.0

    def close(self) -> None:
        pass


class AsyncScheduler:
    """Producer workers ahead of the learner by at most ``max_staleness`` batches (see the module doc)."""

    def __init__(
        self,
        draw: Draw,
        produce: Produce,
        generator: GeneratorCopy,
        *,
        max_staleness: int,
        workers: int,
        timeout: float,
        position: int,
        mode: str = "async",
    ):
        self.draw, self.produce, self.generator = draw, produce, generator
        self.max_staleness, self.n_workers, self.timeout, self.mode = max_staleness, workers, timeout, mode
        self.data_position = position  # after the last batch the learner took: resume starts there
        self._cond = threading.Condition()
        self._requested = self._started = self._taken = 0
        self._finished: dict[int, Produced | BaseException] = {}
        self._stopping = False
        self._threads: list[threading.Thread] = []

    @property
    def evaluation_backend(self):
        """What the learner's thread evaluates with while producers run: an engine the producers share (vLLM)
        through the generator's lock, so that no push lands in an evaluation's generate call either; HF
        evaluates on the policy itself (the producers have their own copy)."""
        return self.generator if self.generator.own_model is None else self.generator.trainer_backend

    def _may_start(self) -> bool:
        return self._stopping or self._started < self._requested + self.max_staleness

    def _work(self) -> None:
        while True:
            claimed = self._claim()
            if claimed is None:
                return
            index, drawn = claimed
            result: Produced | BaseException
            try:
                if isinstance(drawn, BaseException):
                    raise drawn
                episodes, scores, seconds = self.produce(drawn, _Stoppable(self.generator, lambda: self._stopping))
                installed = self.generator.take_install_seconds()  # pushes installed since the last batch
                if installed is not None:
                    seconds = {**seconds, "weight_install_time": installed}
                result = Produced(index, episodes, scores, drawn.data_position, seconds)
            except BaseException as err:  # handed to the learner, which raises it with the batch number
                result = err
            with self._cond:
                self._finished[index] = result
                self._cond.notify_all()

    def _claim(self) -> tuple[int, Drawn | BaseException] | None:
        """The next batch this worker may start, its rows drawn under the lock (so in stream order, whatever
        order the workers finish in); None when stopping."""
        with self._cond:
            self._cond.wait_for(self._may_start)
            if self._stopping:
                return None
            index = self._started
            self._started += 1
            try:
                return index, self.draw(index)
            except Exception as err:
                return index, err

    def next_batch(self, round_index: int) -> Produced:
        """The next batch in stream order; waits at most ``timeout`` seconds for it."""
        if not self._threads:  # started on first use: a resumed run has set the data position by then
            for n in range(self.n_workers):
                thread = threading.Thread(target=self._work, name=f"rollout-producer-{n}", daemon=True)
                thread.start()
                self._threads.append(thread)
        start = time.perf_counter()
        with self._cond:
            self._requested += 1
            self._cond.notify_all()
            index = self._taken
            if not self._cond.wait_for(lambda: index in self._finished, timeout=self.timeout):
                raise RolloutTimeout(
                    f"no rollout batch finished within rollout_timeout={self.timeout:g}s (batch {index}: "
                    "a hung episode, tool or judge?); raise rollout_timeout (section rollout) if batches are "
                    "just slow"
                )
            result = self._finished.pop(index)
            self._taken += 1
        if isinstance(result, BaseException):
            self.close()
            raise RolloutProducerError(result, index) from result
        self.data_position = result.data_position
        result.producer_seconds, result.seconds = result.seconds, {"rollout_wait_time": time.perf_counter() - start}
        return result

    def after_update(self, model, version: int) -> float:
        """Push the updated weights to the generator; the learner's seconds (``hf``: staging only, installed at
        the start of the generator's next call; an engine's own copy: loaded between two calls)."""
        return self.generator.push(model, version)

    def close(self) -> None:
        """Stop the workers (a batch in flight is dropped: a resumed run regenerates it) and wait until each
        has left the model: at most its generate call in progress, else ``timeout`` seconds for them all (a hung
        one is logged and left; the learner is done with it)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        deadline = time.monotonic() + self.timeout
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
                if thread.is_alive():
                    log.warning("rollout producer %s still running %gs after close", thread.name, self.timeout)
