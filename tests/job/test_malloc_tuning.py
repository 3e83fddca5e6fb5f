"""glibc malloc tuned for torch's large CPU buffers (job/malloc_tuning.py): freed activations are reused from
the heap instead of going back to the kernel and coming back as fresh pages. Measured in fresh processes by
the minor page faults of the pattern a step makes: a batch of few-MiB tensors allocated, all freed, again."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from grouprl.job.malloc_tuning import tune_malloc

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")

PATTERN = """
import resource, sys, torch
if sys.argv[1] == "tuned":
    from grouprl.job.malloc_tuning import tune_malloc
    assert tune_malloc() and tune_malloc()  # set, and a second call is a no-op that says so
torch.ones(1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    batch = [torch.ones(2_000_000 + 10_000 * j) for j in range(10)]  # ~8 MB each, ~80 MB in all
    del batch
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", PATTERN, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@glibc
def test_tuned_malloc_reuses_freed_tensor_memory_instead_of_faulting_it_in_again():
    default, tuned = page_faults("default"), page_faults("tuned")
    # the first round's ~80 MB (~20k pages) must be faulted in either way; after that, only glibc's defaults
    # hand the memory back to the kernel (the freed heap top is trimmed) and fault it in again every round
    assert tuned < 0.6 * default, (tuned, default)


@glibc
def test_tune_malloc_is_applied_once_and_says_so():
    assert tune_malloc() is True
    assert tune_malloc() is True
