"""Start real multi-process jobs from tests: ``torchrun`` on localhost with the gloo backend."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKERS = Path(__file__).resolve().parent / "workers"


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This checkout's ``src`` first on the path (the venv's editable install may point elsewhere),
    one thread per process (two processes share the machine's cores)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update({"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", **(extra or {})})
    return env


def torchrun(
    args: list[str], nproc: int = 2, timeout: float = 300, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """``torchrun --standalone`` (a free rendezvous port on localhost) with ``nproc`` processes."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env(env), cwd=cwd)
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
        )
    return proc
