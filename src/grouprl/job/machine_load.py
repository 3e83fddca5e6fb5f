"""A busy machine, said once: on a CPU whose load average is above its core count, torch's threads
contend with the other processes and a step's time swings several-fold (11 s to 120 s was seen on 2
shared cores); fewer threads make it steady."""

from __future__ import annotations

import os


def busy_machine_advice(load: float | None = None, cores: int | None = None, threads: int | None = None) -> str | None:
    """One line of advice when the 1-minute load average is above the core count, else None."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # not available on this system
            return None
    cores = cores or os.cpu_count() or 1
    if load <= cores:
        return None
    if threads is None:
        import torch

        threads = torch.get_num_threads()
    if threads <= 1:
        return None  # one thread already: nothing of ours to change
    return (
        f"this machine is busy (load average {load:.1f} on {cores} cores) and torch uses {threads} threads, "
        "which contend with the other processes, so step times will swing; set OMP_NUM_THREADS=1 (or "
        "--num_threads 1) to make them steady"
    )
