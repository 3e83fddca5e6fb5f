"""Real attacks through the real sandbox (src/grouprl/rewards/sandbox/runner.py).

Every test except the forced-fallback one needs bubblewrap; they skip (with the reason)
only when bwrap is missing or cannot start here. Install it with .ci/install-system-deps.
"""

from __future__ import annotations

import socket
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pytest

from grouprl.rewards.sandbox import runner as sandbox
from grouprl.rewards.sandbox.runner import SandboxFallbackWarning, run_in_sandbox, run_many

REPO_ROOT = Path(__file__).resolve().parents[3]


def run(code: str, **kw):
    return run_in_sandbox(code, backend="bwrap", **kw)


def test_normal_program_works(bwrap):
    code = (
        "import sys\n"
        "data = sys.stdin.read()\n"
        "with open('out.txt', 'w') as f: f.write(data.upper())\n"
        "with open('/tmp/other.txt', 'w') as f: f.write('x')\n"
        "print(open('out.txt').read(), sum(range(10)))\n"
        "print('err', file=sys.stderr)\n"
    )
    r = run(code, stdin="hello")
    assert r.ok, r
    assert r.backend == "bwrap"
    assert r.exit_code == 0 and not r.timed_out and r.killed_reason is None and not r.truncated
    assert r.stdout == "HELLO 45\n"
    assert r.stderr == "err\n"


def test_nonzero_exit_is_not_ok(bwrap):
    r = run("raise SystemExit(3)")
    assert not r.ok and r.exit_code == 3 and r.killed_reason is None


def test_scratch_leaves_nothing_on_the_host(bwrap):
    # The scratch dir is a tmpfs inside the sandbox's mount namespace: nothing of it is on the host,
    # even when the program makes it unremovable for a normal user (chmod 000).
    tmp = Path(tempfile.gettempdir())
    before = set(tmp.glob("grouprl-sbx*"))  # other people's files in /tmp come and go
    code = (
        "import os\nopen('junk.bin', 'wb').write(b'x' * 1000)\nos.makedirs('sub/deeper')\n"
        "open('sub/deeper/f', 'w').write('x')\nos.chmod('sub/deeper', 0)\nos.chmod('sub', 0)\n"
        "print(os.getcwd())"
    )
    r = run(code)
    assert r.ok and r.stdout == "/tmp\n", r
    assert set(tmp.glob("grouprl-sbx*")) == before


def test_network_loopback_blocked(bwrap):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def accept_loop():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                accepted.append(conn)
            except OSError:
                pass

    t = threading.Thread(target=accept_loop, daemon=True)
    t.start()
    # Sanity: the listener is reachable from outside the sandbox.
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    time.sleep(0.3)
    n_before = len(accepted)
    code = (
        "import socket\n"
        f"s = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "s.sendall(b'leak')\n"
        "print('CONNECTED')\n"
    )
    try:
        r = run(code, timeout_s=5)
        time.sleep(0.3)
    finally:
        stop.set()
        t.join()
        srv.close()
    assert not r.ok
    assert "CONNECTED" not in r.stdout
    assert "Error" in r.stderr  # ConnectionRefused / network unreachable
    assert len(accepted) == n_before


def test_write_outside_scratch_fails(bwrap, tmp_path):
    targets = [tmp_path / "pwned.txt", REPO_ROOT / "pwned_by_sandbox.txt", Path("/etc/pwned_by_sandbox")]
    code = "import sys\nok = 0\n"
    for p in targets:
        code += (
            f"try:\n    open({str(p)!r}, 'w').write('x')\n    print('WROTE', {str(p)!r})\n"
            "except OSError as e:\n    print('denied', type(e).__name__)\n"
        )
    r = run(code)
    assert r.exit_code == 0, r
    assert "WROTE" not in r.stdout
    assert r.stdout.count("denied") == len(targets)
    for p in targets:
        assert not p.exists()


def test_planted_secret_in_home_unreadable(bwrap):
    home = Path.home()
    secret_dir = Path(tempfile.mkdtemp(prefix="sbx-secret-", dir=home))
    try:
        secret = secret_dir / "secret.txt"
        secret.write_text("TOP-SECRET-TOKEN")
        secret.chmod(0o644)
        secret_dir.chmod(0o755)
        code = (
            "import os, glob\n"
            f"try:\n    print(open({str(secret)!r}).read())\nexcept OSError as e:\n    print('denied', type(e).__name__)\n"
            f"print(sorted(glob.glob({str(home)!r} + '/**/secret.txt', recursive=True)))\n"
        )
        r = run(code)
        assert r.exit_code == 0, r
        assert "TOP-SECRET-TOKEN" not in r.stdout
        assert "denied" in r.stdout
        assert "secret.txt" not in r.stdout.splitlines()[-1]
    finally:
        for p in secret_dir.iterdir():
            p.unlink()
        secret_dir.rmdir()


def test_infinite_loop_times_out(bwrap):
    t0 = time.monotonic()
    r = run("while True: pass", timeout_s=1.0, cpu_s=10)
    elapsed = time.monotonic() - t0
    assert r.timed_out and r.killed_reason == "timeout" and not r.ok
    assert elapsed < 1.0 + 2.0


def test_cpu_limit(bwrap):
    r = run("while True: pass", timeout_s=10, cpu_s=1)
    assert not r.ok and not r.timed_out
    assert r.killed_reason == "cpu"
    assert r.duration_s < 9  # before the 10 s timeout (1 CPU second takes longer on a loaded machine)


def test_memory_bomb_stopped(bwrap):
    r = run("x = bytearray(4 * 1024 ** 3)\nprint('allocated')", memory_mb=512)
    assert not r.ok
    assert "allocated" not in r.stdout
    assert r.killed_reason == "memory" or "MemoryError" in r.stderr


def test_fork_bomb_contained(bwrap):
    code = (
        "import os, time\n"
        "n = 0\n"
        "while True:\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(30)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "print('forked', n, flush=True)\n"
        "while True:\n"  # keep going: the sandbox must still be torn down at the timeout
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        "        pass\n"
    )
    t0 = time.monotonic()
    r = run(code, timeout_s=3, max_procs=32)
    elapsed = time.monotonic() - t0
    assert r.timed_out and elapsed < 3 + 2
    first = r.stdout.split()
    assert first[:1] == ["forked"] and int(first[1]) < 32
    # The host is still healthy: we can start processes, and nothing is left behind.
    assert run("print('alive')").stdout == "alive\n"


def test_huge_output_truncated(bwrap):
    code = "import sys\nchunk = 'x' * 1_000_000\nfor _ in range(100):\n    sys.stdout.write(chunk)\n"
    t0 = time.monotonic()
    r = run(code, max_output_bytes=100_000, timeout_s=10)
    assert time.monotonic() - t0 < 5
    assert r.truncated and r.killed_reason == "output" and not r.ok
    assert len(r.stdout) <= 100_000


def test_run_many_keeps_order(bwrap):
    rs = run_many([f"print({i} * {i})" for i in range(8)], workers=4, backend="bwrap")
    assert [r.stdout.strip() for r in rs] == [str(i * i) for i in range(8)]
    assert all(r.ok and r.backend == "bwrap" for r in rs)


def test_forced_fallback_warns_and_counts(monkeypatch):
    monkeypatch.setattr(sandbox, "_warned", False)
    before = sandbox.SANDBOX_FALLBACKS
    with pytest.warns(SandboxFallbackWarning, match="rlimits only"):
        r = run_in_sandbox("print(6 * 7)", backend="rlimits")
    assert r.ok and r.stdout == "42\n" and r.backend == "rlimits"
    assert sandbox.SANDBOX_FALLBACKS == before + 1
    # One-time warning, but every fallback run is counted.
    with warnings.catch_warnings():
        warnings.simplefilter("error", SandboxFallbackWarning)
        r2 = run_in_sandbox("while True: pass", backend="rlimits", timeout_s=1, cpu_s=10)
    assert r2.timed_out and r2.backend == "rlimits"
    assert sandbox.SANDBOX_FALLBACKS == before + 2
