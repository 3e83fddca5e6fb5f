"""What the benchmarks share: the repository's root and the environment of the child processes they start.

A benchmark that runs one of its own modules in a child process (a worker per run, a part per process) starts it
as ``python -m bench.<folder>.<module>`` with ``child_pythonpath()``: the repository's root (this package) and
``src/`` (grouprl, where it is not installed, e.g. on a GPU machine that only carries the working tree).
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def child_pythonpath(keep_caller: bool = True) -> str:
    """PYTHONPATH for a child process: what the caller had (a GPU image's carried wheels) unless ``keep_caller`` is
    false, then the repository's root and ``src/`` where they are missing."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] if keep_caller else []
    return os.pathsep.join(paths + [p for p in (str(ROOT), str(ROOT / "src")) if p not in paths])
