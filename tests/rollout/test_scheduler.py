"""The rollout scheduler's threads: the staleness bound holds whatever the timing, stream order is kept,
and a producer that raises or hangs stops the learner with a clear error, never a hang."""

from __future__ import annotations

import threading
import time

import pytest

from grouprl.rollout.sampling import Completion
from grouprl.rollout.scheduler import AsyncScheduler, Drawn, RolloutProducerError, RolloutTimeout
from grouprl.rollout.weight_sync import GeneratorCopy


class CountingEngine:
    """An engine holding its own 'weights' (a number): what it generates says which it had."""

    def __init__(self):
        self.weights = 0

    def generate(self, prompt_ids, params):
        return [Completion([self.weights], str(self.weights), False, [0.0]) for _ in prompt_ids]

    def load_weights(self, model) -> None:
        self.weights = model


def _scheduler(produce, *, max_staleness=1, workers=2, timeout=10.0):
    position = [0]

    def draw(index: int) -> Drawn:
        position[0] += 2
        return Drawn([{"i": index}], index * 2, position[0])

    generator = GeneratorCopy(CountingEngine(), version=0)
    return AsyncScheduler(
        draw, produce, generator, max_staleness=max_staleness, workers=workers, timeout=timeout, position=0
    ), generator


@pytest.mark.parametrize("max_staleness,workers", [(0, 1), (1, 1), (2, 3)])
def test_no_batch_is_trained_more_than_max_staleness_versions_after_its_weights(max_staleness, workers):
    def produce(drawn, generator):
        completions = generator.generate([[1]], None)
        time.sleep(0.01 * (drawn.rows[0]["i"] % 3))  # finish out of order
        return [completions[0].policy_version], None, {"generation_time": 0.01}

    scheduler, generator = _scheduler(produce, max_staleness=max_staleness, workers=workers)
    try:
        for step in range(8):  # the learner at version `step` takes batch `step`, updates, pushes step + 1
            batch = scheduler.next_batch(step)
            assert batch.index == step and batch.data_position == 2 * (
                step + 1
            )  # stream order, whatever finished first
            (version,) = batch.episodes
            assert 0 <= step - version <= max_staleness
            assert set(batch.seconds) == {"rollout_wait_time"} and batch.producer_seconds == {"generation_time": 0.01}
            time.sleep(0.01)
            generator.push(step + 1, step + 1)
    finally:
        scheduler.close()
    assert len(generator.pushes) == 8


def test_a_push_waits_for_the_generate_call_in_progress():
    class SlowEngine(CountingEngine):
        def generate(self, prompt_ids, params):
            first = self.weights
            time.sleep(0.2)
            return [Completion([first, self.weights], "", False, [0.0, 0.0])]

    generator = GeneratorCopy(SlowEngine(), version=0)
    out = []
    thread = threading.Thread(target=lambda: out.extend(generator.generate([[1]], None)))
    thread.start()
    time.sleep(0.05)
    generator.push(7, 1)  # lands after the call: its tokens all came from one version
    thread.join()
    assert out[0].ids == [0, 0] and out[0].policy_version == 0 and generator.version == 1


def test_a_producer_crash_reaches_the_learner_with_its_batch():
    def produce(drawn, generator):
        if drawn.rows[0]["i"] == 1:
            raise ValueError("tool server refused")
        return [], None, {}

    scheduler, _ = _scheduler(produce, workers=1)
    scheduler.next_batch(0)
    with pytest.raises(
        RolloutProducerError, match=r"^tool server refused \(in the rollout producer, batch 1; ValueError\)$"
    ):
        scheduler.next_batch(1)


def test_a_hung_episode_is_a_timeout_not_a_hang():
    release = threading.Event()

    def produce(drawn, generator):
        release.wait(30)  # a tool that never answers
        return [], None, {}

    scheduler, _ = _scheduler(produce, workers=1, timeout=0.3)
    start = time.perf_counter()
    try:
        with pytest.raises(RolloutTimeout, match=r"no rollout batch finished within rollout_timeout=0.3s \(batch 0"):
            scheduler.next_batch(0)
        assert time.perf_counter() - start < 5
    finally:
        release.set()
        scheduler.close()


class SlowEngine(CountingEngine):
    """Each generate call takes ``seconds`` (a conversation turn's decoding)."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds, self.calls = seconds, 0

    def generate(self, prompt_ids, params):
        self.calls += 1
        time.sleep(self.seconds)
        return super().generate(prompt_ids, params)


def test_close_waits_for_the_producer_and_stops_it_at_its_next_generate_call():
    engine = SlowEngine(0.2)
    turns_done = []

    def produce(drawn, generator):  # batch 0 at once; the later ones a 40-turn conversation (8 s to its end)
        for turn in range(40 if drawn.rows[0]["i"] else 0):
            generator.generate([[1]], None)
            turns_done.append((drawn.rows[0]["i"], turn))
        return [], None, {}

    scheduler = AsyncScheduler(
        lambda i: Drawn([{"i": i}], i, i + 1),
        produce,
        GeneratorCopy(engine, version=0),
        max_staleness=1,
        workers=2,
        timeout=30.0,
        position=0,
    )
    scheduler.next_batch(0)  # the learner's last batch
    deadline = time.perf_counter() + 10
    while engine.calls < 2 and time.perf_counter() < deadline:  # a producer is mid-conversation in batch 1
        time.sleep(0.01)
    assert engine.calls >= 2
    start = time.perf_counter()
    scheduler.close()
    waited = time.perf_counter() - start
    assert all(not t.is_alive() for t in scheduler._threads), "a producer outlived close()"
    assert waited < 2.0, f"close() waited {waited:.1f}s: the producers ran their conversations on"
    assert not [t for b, t in turns_done if b > 0 and t == 39], "a dropped batch ran to its end"


EXIT_SCRIPT = """
import sys, torch
from grouprl.rollout.sampling import Completion
from grouprl.rollout.scheduler import AsyncScheduler, Drawn
from grouprl.rollout.weight_sync import GeneratorCopy

import threading
started = threading.Event()

class TorchEngine:  # decoding-like work: torch kernels that release the GIL, ~1 s a call
    def generate(self, prompt_ids, params):
        started.set()
        a = torch.randn(600, 600)
        for _ in range(150):
            a = torch.tanh(a @ a / 600)
        return [Completion([0], "0", False, [0.0]) for _ in prompt_ids]
    def load_weights(self, model):
        pass

def produce(drawn, generator):
    for _ in range(20):  # a long conversation: the learner finishes first
        generator.generate([[1]], None)
    return [], None, {}

torch.set_num_threads(1)
scheduler = AsyncScheduler(lambda i: Drawn([{"i": i}], i, i + 1), lambda d, g: ([], None, {}) if d.rows[0]["i"] == 0
                           else produce(d, g), GeneratorCopy(TorchEngine(), version=0), max_staleness=1, workers=2,
                           timeout=60.0, position=0)
scheduler.next_batch(0)
assert started.wait(30)  # a producer is inside torch, mid-conversation
scheduler.close()
print("closed", flush=True)
"""


def test_a_run_that_closes_with_producers_mid_conversation_exits_cleanly(tmp_path):
    """The process ends with exit 0 and no C++ abort: no producer is left inside torch at interpreter exit."""
    import subprocess
    import sys

    script = tmp_path / "close_and_exit.py"
    script.write_text(EXIT_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert "closed" in proc.stdout and "terminate called" not in proc.stderr
