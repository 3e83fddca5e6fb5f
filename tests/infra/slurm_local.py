"""A real one-node SLURM cluster on localhost for tests: munged + slurmctld + slurmd (Debian's
slurm-wlm 22.05 and munge, installed by .ci/install-system-deps), each with its own key, socket,
ports, state and logs under one folder, so several can run side by side and nothing in /etc
is touched. cgroups are off (proctrack/linuxproc, task/none): containers rarely allow them.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol")


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalSlurm:
    def __init__(self, root: Path, cpus: int = 2):
        self.root, self.cpus = Path(root), cpus
        self.conf = self.root / "slurm.conf"
        self.socket = self.root / "munge" / "munge.sock"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    # --- lifecycle -------------------------------------------------------------------------
    def start(self, timeout: float = 60) -> "LocalSlurm":
        for d in ("munge", "state", "spool", "log"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        munge = self.root / "munge"
        munge.chmod(0o711)  # munged refuses a socket dir others can write to; clients must reach it
        subprocess.run(
            [_which("mungekey"), "--create", f"--keyfile={munge / 'munge.key'}"], check=True, capture_output=True
        )
        subprocess.run(
            [
                _which("munged"),
                "--force",
                f"--socket={self.socket}",
                f"--key-file={munge / 'munge.key'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--seed-file={munge / 'seed'}",
            ],
            check=True,
            capture_output=True,
        )
        self._write_conf()
        subprocess.run([_which("slurmctld"), "-f", str(self.conf)], check=True, capture_output=True, env=self.env)
        subprocess.run(
            [_which("slurmd"), "-f", str(self.conf), "-N", "localhost"], check=True, capture_output=True, env=self.env
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.run("sinfo", "-h", "-o", "%t", check=False).stdout.strip()
            if state in ("idle", "mix", "alloc"):
                return self
            time.sleep(0.5)
        raise RuntimeError(f"local SLURM node not idle after {timeout:.0f}s (state {state!r}):\n{self.logs()}")

    def _write_conf(self) -> None:
        user, r = getpass.getuser(), self.root
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=grouprltest",
                    f"SlurmctldHost={socket.gethostname().split('.')[0]}(127.0.0.1)",
                    f"SlurmctldPort={_free_port()}",
                    f"SlurmdPort={_free_port()}",
                    f"SlurmUser={user}",
                    f"SlurmdUser={user}",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={self.socket}",
                    f"StateSaveLocation={r / 'state'}",
                    f"SlurmdSpoolDir={r / 'spool'}",
                    f"SlurmctldPidFile={r / 'slurmctld.pid'}",
                    f"SlurmdPidFile={r / 'slurmd.pid'}",
                    f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
                    f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core",
                    "MpiDefault=none",
                    "ReturnToService=2",
                    "SchedulerType=sched/builtin",
                    f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN",
                    "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )

    def stop(self) -> None:
        """Stop the daemons this instance started (by their pid files), never any other."""
        for pid_file in (self.root / "slurmd.pid", self.root / "slurmctld.pid", self.root / "munge" / "munged.pid"):
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            for _ in range(50):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)

    # --- jobs ------------------------------------------------------------------------------
    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([_which(cmd[0]), *cmd[1:]], capture_output=True, text=True, env=self.env, check=check)

    def sbatch(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
        proc = subprocess.run(
            [_which("sbatch"), "--parsable", *args],
            capture_output=True,
            text=True,
            env={**self.env, **(env or {})},
            cwd=cwd,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch {' '.join(args)} failed: {proc.stderr}\n{self.logs()}")
        return proc.stdout.strip().split(";")[0]

    def wait(self, job: str, timeout: float) -> dict[str, str]:
        """Block until the job leaves the queue; its final JobState/ExitCode (from scontrol)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = self.job_info(job)
            if info.get("JobState") not in (None, "PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
                return info
            time.sleep(1)
        self.run("scancel", job, check=False)
        raise TimeoutError(f"SLURM job {job} still running after {timeout:.0f}s:\n{self.logs()}")

    def job_info(self, job: str) -> dict[str, str]:
        out = self.run("scontrol", "show", "job", "-o", job, check=False).stdout
        return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)

    def logs(self) -> str:
        parts = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            path = self.root / "log" / name
            if path.is_file():
                parts.append(f"--- {name} (tail) ---\n" + "\n".join(path.read_text().splitlines()[-15:]))
        return "\n".join(parts)
