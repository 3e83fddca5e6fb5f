"""Free heap pages back to the kernel (glibc ``malloc_trim``), where a phase that allocated much has ended.

Each thread that allocates gets its own glibc arena, and each arena keeps what it freed (``job/malloc_tuning.py``
keeps even more of it on purpose): the agent endpoint generates on its own thread, the update runs on the main one,
so without a trim between them a step's RSS is the sum of the two phases' peaks. The rollout runners trim when
their episodes have ended (``rollout/turn_cache.py: episodes_ended``), the job after each phase.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform


def release_free_heap() -> bool:
    """Hand the free pages of every malloc arena back to the kernel (glibc ``malloc_trim(0)``); whether it could.
    Costs milliseconds; call it where a phase that allocated much has ended, not per op."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):
        return False
