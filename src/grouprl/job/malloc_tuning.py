"""glibc's malloc set to keep torch's large CPU buffers instead of handing them back to the kernel after every op.

Why: torch's CPU allocator takes every tensor from malloc. glibc serves a request above its mmap threshold
(128 KiB at start, raised on the fly up to 32 MiB as such blocks are freed) with a fresh ``mmap`` and unmaps
it on free, and it trims the heap's free top above 128 KiB back to the kernel. A training step or a batched
generation allocates and frees the same few-MiB activations, KV caches and gradients many times over, so each
one comes back as new pages the kernel must zero on first touch. With the threshold fixed at 32 MiB (the most
glibc allows on 64-bit) and the trim threshold at 2 GiB, freed blocks are reused from the heap: in one pair of
runs the main job took 80.8 s against 84.0 s, its first held-out evaluation 9.6 s against 11.1 s, at the same
peak RSS (docs/performance.md, "malloc tuning"). Memory a run freed stays with the process until it exits.

Each thread that allocates gets its own glibc arena, and each arena keeps what it freed: the warm start's SFT and
the update run on the main thread, the agent endpoint's generation on its batcher thread, so a run's RSS is the sum
of those phases' peaks (the agent main job: 6.4 GB of SFT + ~5 GB of generation = 11.7 GB, though no phase needed
more than 7). :func:`release_free_heap` (glibc's ``malloc_trim``) hands every arena's free pages back; the job calls
it where a phase ends (after the warm start, after each step: :class:`ReleaseFreeHeap`, after an evaluation).

Applied by ``grouprl train`` (``job/run.py``) unless ``runtime.tune_malloc`` is false; glibc only (elsewhere, or
where ``mallopt`` refuses, nothing changes). Other allocators (jemalloc, tcmalloc via ``LD_PRELOAD``) are left
alone: mallopt is glibc's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

from grouprl.job.observer import TrainObserver
from grouprl.speed.free_heap import release_free_heap

__all__ = ["ReleaseFreeHeap", "release_free_heap", "tune_malloc"]

M_TRIM_THRESHOLD = -1  # <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: 4 MiB * sizeof(long)
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int: trim only a free heap top of 2 GiB or more

_applied: bool | None = None


def tune_malloc() -> bool:
    """Set glibc's mmap and trim thresholds for this process (once); whether they were set."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success; a threshold it refuses leaves glibc as it was
    mmap_ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    trim_ok = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    _applied = mmap_ok and trim_ok
    return _applied


class ReleaseFreeHeap(TrainObserver):
    """After each step: what the step's generation (the endpoint's thread, its own arena) and update freed goes
    back to the kernel, so the arenas' peaks do not add up."""

    def after_step(self, view, step: int, metrics: dict[str, float]) -> None:
        release_free_heap()
