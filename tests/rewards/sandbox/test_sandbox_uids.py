"""Sandbox uids are unique on the machine: two trainer processes never hand out the same uid, and a
uid held by a process that died is free again. Real processes, real locks on the real filesystem."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grouprl.rewards.sandbox import uids
from grouprl.rewards.sandbox.runner import run_in_sandbox

SRC = str(Path(__file__).resolve().parents[3] / "src")

HOLDER = textwrap.dedent("""
    import json, sys, time
    from grouprl.rewards.sandbox.uids import acquire_uid
    held = [acquire_uid() for _ in range(int(sys.argv[1]))]
    print(json.dumps(held), flush=True)
    sys.stdin.readline()  # hold them until told
""")


def _holder(n: int, env: dict) -> tuple[subprocess.Popen, list[int]]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    return p, json.loads(p.stdout.readline())


def test_two_processes_never_share_a_uid_and_a_dead_holders_uids_come_back(tmp_path):
    env = {**os.environ, "PYTHONPATH": SRC, "GROUPRL_SANDBOX_UID_LOCKS": str(tmp_path / "locks")}
    first, a = _holder(40, env)
    second, b = _holder(40, env)
    try:
        assert len(set(a)) == 40 and len(set(b)) == 40
        assert not set(a) & set(b), sorted(set(a) & set(b))  # per-process slots would give both 2000000..
        first.kill()  # a crash: the kernel drops its locks
        first.wait()
        third, c = _holder(4096 - 40, env)  # every slot the living holder does not hold
        try:
            assert not set(c) & set(b) and set(a) <= set(c)
        finally:
            third.stdin.close()
            third.wait()
    finally:
        for p in (first, second):
            if p.poll() is None:
                p.stdin.close()
                p.wait()


def test_a_taken_slot_is_refused_in_this_process_too(tmp_path, monkeypatch):
    monkeypatch.setenv("GROUPRL_SANDBOX_UID_LOCKS", str(tmp_path / "locks"))
    got = [uids.acquire_uid() for _ in range(3)]
    try:
        assert len(set(got)) == 3
    finally:
        for uid in got:
            uids.release_uid(uid)


def test_a_lock_directory_others_can_write_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv("GROUPRL_SANDBOX_UID_LOCKS", str(shared))
    with pytest.raises(RuntimeError, match="not ours alone"):
        uids.acquire_uid()


@pytest.mark.usefixtures("bwrap")
def test_sandbox_runs_of_two_processes_as_root_get_different_uids(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("per-run uids are handed out only as root")
    env = {**os.environ, "PYTHONPATH": SRC}
    other, theirs = _holder(1, env)  # another trainer's run holds one uid machine-wide
    try:
        seen = {int(run_in_sandbox("import os; print(os.getuid())", backend="bwrap").stdout) for _ in range(3)}
        assert theirs[0] not in seen and all(u >= 2_000_000 for u in seen)
    finally:
        other.stdin.close()
        other.wait()
