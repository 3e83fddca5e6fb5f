"""A full device while a log is appended: one line naming "No space left on device", the device and
the folder; the log keeps whole lines only (the failed append is cut back, no torn last line).

The disk is a real size-limited tmpfs (needs root, as CI runs; skipped elsewhere), and a real
RLIMIT_FSIZE for the file-size limit."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest

from grouprl.observe.disk import DiskFull, device_of
from grouprl.observe.jsonl import JsonlAppender, truncate_to_step


@pytest.fixture()
def tiny_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {made.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _lines(path):
    data = path.read_bytes()
    assert data.endswith(b"\n")  # no torn last line
    return [json.loads(line) for line in data.splitlines()]


@pytest.mark.parametrize("per_write", [1, 7])
def test_a_full_disk_keeps_whole_lines_and_says_where(tiny_disk, per_write):
    log = tiny_disk / "run" / "rollouts.jsonl"
    (tiny_disk / "filler").write_bytes(b"\0" * 16384)
    written = 0
    with JsonlAppender(log) as out:
        with pytest.raises(DiskFull) as info:
            while True:  # until the device is full
                out.write_many([{"step": written + i, "completion": "x" * 997} for i in range(per_write)])
                written += per_write
    message = str(info.value)
    assert "No space left on device" in message and "tmpfs" in message and str(tiny_disk) in message
    assert "rollouts.jsonl" in message and str(log.parent) in message and "\n" not in message
    rows = _lines(log)
    assert [r["step"] for r in rows] == list(range(written))  # every append whole, the failed one gone whole
    (tiny_disk / "filler").unlink()  # space freed: the log takes the next records whole, right after the last
    with JsonlAppender(log) as out:
        out.write({"step": written, "completion": "after"})
    assert [r["step"] for r in _lines(log)] == list(range(written + 1))


def test_truncating_on_a_full_disk_leaves_the_old_file(tiny_disk):
    log = tiny_disk / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s, "pad": "y" * 900}) + "\n" for s in range(1, 41)))
    (tiny_disk / "filler").write_bytes(b"\0" * (64 * 1024 - log.stat().st_size - 8192))  # too little room for a copy
    before = log.read_bytes()
    with pytest.raises(OSError):
        truncate_to_step(log, 39)  # the copy needs ~36 KB, the device has 8
    assert log.read_bytes() == before and sorted(p.name for p in tiny_disk.iterdir()) == ["filler", "metrics.jsonl"]


def test_a_file_size_limit_is_named_too(tmp_path):
    """RLIMIT_FSIZE (a batch system's limit): EFBIG, not ENOSPC; the same cut-back and one line."""
    code = (
        "import sys; from grouprl.observe.jsonl import JsonlAppender\n"
        "out = JsonlAppender(sys.argv[1])\n"
        "try:\n"
        "    for i in range(1000): out.write_many([{'step': i, 'x': 'z' * 300}] * 3)\n"
        "except Exception as err: print(type(err).__name__, err)\n"
    )
    limit = 10_000
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "log.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
    )
    assert proc.stdout.startswith("DiskFull File too large"), proc.stdout + proc.stderr
    rows = _lines(tmp_path / "log.jsonl")
    assert len(rows) % 3 == 0 and 0 < (tmp_path / "log.jsonl").stat().st_size <= limit


def test_device_of_names_the_mount(tiny_disk):
    assert device_of(tiny_disk / "not" / "yet") == f"device tmpfs, a tmpfs mounted at {tiny_disk}"
    assert "mounted at" in device_of(os.getcwd())
