"""Progress for a wait of more than a few seconds (an evaluation, ``grouprl eval``): rich's bar in a
terminal; in a log (SLURM, a pipe) a line at the start and one every ``LOG_EVERY_S`` seconds, since a
bar is not drawn there until it ends. Both show the tokens generated per second."""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator

LOG_EVERY_S = 10.0

# done, total, generated tokens so far
ProgressUpdate = Callable[[int, int, int], None]


@contextlib.contextmanager
def phase_progress(console, description: str, total: int, unit: str = "prompts") -> Iterator[ProgressUpdate]:
    """``update(done, total, tokens)`` for the phase named ``description`` (nothing when ``console`` is None)."""
    if console is None:
        yield lambda done, total_, tokens: None
        return
    start = time.perf_counter()

    def rate(tokens: int) -> str:
        return f"{tokens / max(time.perf_counter() - start, 1e-9):.0f} tokens/s"

    if console.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn(description),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(unit),
            TimeElapsedColumn(),
            TextColumn("{task.fields[rate]}"),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task(description, total=total, rate="")
            yield lambda done, total_, tokens: bar.update(task, completed=done, total=total_, rate=rate(tokens))
        return
    console.log(f"{description}: 0/{total} {unit}")
    last = [start]

    def update(done: int, total_: int, tokens: int) -> None:
        now = time.perf_counter()
        if now - last[0] >= LOG_EVERY_S or done >= total_:
            console.log(f"{description}: {done}/{total_} {unit} ({now - start:.0f} s, {rate(tokens)})")
            last[0] = now

    yield update
