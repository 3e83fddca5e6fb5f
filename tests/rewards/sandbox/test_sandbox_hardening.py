"""Sandbox isolation attacks from the hardening campaign (issue 9), run for real with bwrap.

The non-root cases run the trainer side as user ``nobody`` (``setpriv`` and a Python nobody can
run; ``grouprl.rewards.sandbox.runner`` needs only the standard library); they skip when we are not
root (then the whole suite already runs as a normal user) or no such Python exists.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import venv
from pathlib import Path

import pytest

from grouprl.rewards.sandbox import runner as sandbox
from grouprl.rewards.sandbox.cgroup import SandboxCgroup
from grouprl.rewards.sandbox.runner import run_in_sandbox

REPO_SRC = Path(__file__).resolve().parents[3] / "src"
SYSTEM_PYTHON = "/usr/bin/python3"


pytestmark = pytest.mark.usefixtures("bwrap")  # conftest: skip where bubblewrap cannot start


def run(code: str, **kw):
    return run_in_sandbox(code, backend="bwrap", **kw)


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
# grouprl/__init__.py registers pydantic config sections; the sandbox needs only the standard library,
# so the system Python (no pydantic) imports the package without running that __init__.
NO_PACKAGE_INIT = (
    "import sys, types\n_pkg = types.ModuleType('grouprl')\n"
    f"_pkg.__path__ = [{str(REPO_SRC / 'grouprl')!r}]\nsys.modules['grouprl'] = _pkg\n"
)


@functools.lru_cache(maxsize=1)
def nobody_python() -> str | None:
    """A Python that user nobody can run (ours may live under root's 0700 home)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return None
    check = (
        NO_PACKAGE_INIT + "import os, sys, grouprl.rewards.sandbox.runner\n"
        "assert os.access(os.path.realpath(sys.executable), os.R_OK) and os.path.isdir(sys.base_prefix)"
    )
    for cand in (SYSTEM_PYTHON, "/usr/local/bin/python3"):
        ok = subprocess.run(
            [*NOBODY, cand, "-c", check],
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_SRC)},
            capture_output=True,
        )
        if ok.returncode == 0:
            return cand
    return None


def as_nobody(script: str, env: dict[str, str] | None = None, timeout: float = 60) -> dict:
    """Run ``script`` (which prints one JSON line last) as a non-root trainer; ``PYTHON`` in it
    names the interpreter (also used inside the sandbox)."""
    python = nobody_python()
    if python is None:
        pytest.skip(
            "needs root (to become nobody with setpriv) and a Python that nobody can run "
            "(.ci/install-system-deps installs python3)"
        )
    full_env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_SRC), **(env or {})}
    p = subprocess.run(
        [*NOBODY, python, "-c", NO_PACKAGE_INIT + f"PYTHON = {python!r}\n" + textwrap.dedent(script)],
        env=full_env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


ENVIRON_DUMP = (
    "import os\nout = []\nfor p in os.listdir('/proc'):\n    try:\n"
    "        out.append(open(f'/proc/{p}/environ', 'rb').read().decode())\n"
    "    except (OSError, NotADirectoryError):\n        pass\nprint(out)\n"
)


def test_trainer_secrets_invisible_as_root(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_root_secret_123")
    r = run(ENVIRON_DUMP)
    assert r.ok, r
    assert "hf_root_secret_123" not in r.stdout


def test_trainer_secrets_invisible_when_not_root():
    # bwrap is pid 1 of the sandbox and runs as the trainer's uid: its /proc/1/environ is readable.
    out = as_nobody(
        f"""
        import json
        from grouprl.rewards.sandbox.runner import run_in_sandbox
        r = run_in_sandbox({ENVIRON_DUMP!r}, backend="bwrap", python=PYTHON)
        print(json.dumps({{"ok": r.ok, "stdout": r.stdout, "err": r.stderr[-500:], "infra": r.infra_error}}))
    """,
        env={"HF_TOKEN": "hf_nobody_secret_456", "WANDB_API_KEY": "wandb_secret_789"},
    )
    assert out["ok"], out
    assert "PATH=" in out["stdout"]  # it did read environments, ours among them
    assert "secret" not in out["stdout"]


def test_many_tasks_of_a_normal_user_do_not_break_the_sandbox():
    # RLIMIT_NPROC counts every task of the real uid; a trainer with 150 threads used to make
    # bwrap fail with EAGAIN (every program scored 0.0).
    out = as_nobody("""
        import json, threading
        from grouprl.rewards.sandbox.runner import run_in_sandbox
        stop = threading.Event()
        threads = [threading.Thread(target=stop.wait) for _ in range(150)]
        for t in threads: t.start()
        r = run_in_sandbox("print(6 * 7)", backend="bwrap", python=PYTHON, max_procs=16)
        stop.set()
        print(json.dumps({"ok": r.ok, "stdout": r.stdout, "infra": r.infra_error}))
    """)
    assert out == {"ok": True, "stdout": "42\n", "infra": None}


def test_sandbox_that_cannot_start_is_an_infrastructure_error_when_not_root():
    # After a passing probe, the user's hard process limit leaves no room: bwrap cannot start.
    out = as_nobody("""
        import json, resource, threading
        from grouprl.rewards.sandbox import launchers, runner as sandbox
        assert sandbox.bwrap_available(PYTHON)[0]
        stop = threading.Event()
        threads = [threading.Thread(target=stop.wait) for _ in range(20)]
        for t in threads: t.start()
        n = launchers._user_task_count(65534)
        # Room for our own reader threads and the fork, not for the sandbox's process budget.
        resource.setrlimit(resource.RLIMIT_NPROC, (n + 8, n + 8))
        try:
            r = sandbox.run_in_sandbox("print('ran')", backend="bwrap", python=PYTHON)
        finally:
            stop.set()
        print(json.dumps({"ok": r.ok, "stdout": r.stdout, "infra": r.infra_error,
                          "count": sandbox.SANDBOX_INFRA_ERRORS}))
    """)
    assert not out["ok"] and out["stdout"] == "" and out["count"] == 1
    assert "could not start the program" in out["infra"]


def test_nested_user_namespaces_blocked():
    code = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "rc = libc.unshare(0x10000000)\nprint(rc, os.strerror(ctypes.get_errno()))\n"
        "import subprocess\nprint(subprocess.run(['unshare', '-U', 'true']).returncode)\n"
    )
    r = run(code)
    assert r.ok, r
    assert r.stdout.splitlines()[0].startswith("-1 ") and r.stdout.splitlines()[1] != "0"
    out = as_nobody(f"""
        import json
        from grouprl.rewards.sandbox.runner import run_in_sandbox
        r = run_in_sandbox({code!r}, backend="bwrap", python=PYTHON)
        print(json.dumps({{"ok": r.ok, "stdout": r.stdout}}))
    """)
    assert out["ok"] and out["stdout"].splitlines()[0].startswith("-1 ") and out["stdout"].splitlines()[1] != "0"


def test_interpreter_in_a_tmp_venv_runs(tmp_path):
    assert str(tmp_path).startswith(tempfile.gettempdir())
    venv.EnvBuilder(with_pip=False, symlinks=True).create(tmp_path / "venv")
    python = str(tmp_path / "venv" / "bin" / "python")
    usable, why = sandbox.bwrap_available(python)
    assert usable, why
    r = run("import sys\nprint(sys.prefix)\nopen('/tmp/scratch.txt', 'w').write('ok')", python=python)
    assert r.ok and r.stdout.strip() == str(tmp_path / "venv"), r


def test_memfd_refused():
    r = run("import os\nfd = os.memfd_create('hold')\nos.write(fd, b'x' * (64 << 20))\nprint('held')")
    assert not r.ok and "held" not in r.stdout and "Operation not permitted" in r.stderr


def test_memory_of_all_processes_is_capped_where_a_cgroup_exists():
    probe = SandboxCgroup.create(64 << 20)
    if probe is None:
        pytest.skip("no memory cgroup can be made here; RLIMIT_AS per process is the limit (docs/security.md)")
    probe.remove()
    # Eight processes of 200 MB each stay under RLIMIT_AS=512 MB each, but not under the run's cgroup.
    code = (
        "import os, time\nkids = []\nfor _ in range(8):\n    pid = os.fork()\n    if pid == 0:\n"
        "        b = bytearray(200 << 20)\n        for i in range(0, len(b), 4096): b[i] = 1\n"
        "        time.sleep(2)\n        os._exit(0)\n    kids.append(pid)\n"
        "codes = [os.waitpid(p, 0)[1] for p in kids]\nprint(sum(c != 0 for c in codes))\n"
    )
    r = run(code, memory_mb=512, timeout_s=20)
    assert r.killed_reason == "memory", r
    assert int(r.stdout.strip() or 8) > 0


def test_only_system_and_interpreter_are_visible(tmp_path):
    # Plant what the campaign read: a dataset with gold answers, an HF token outside home, a host
    # unix socket, another run's scratch dir outside /tmp.
    planted = Path(tempfile.mkdtemp(prefix="sbx-planted-", dir="/var/tmp"))
    try:
        (planted / "test.jsonl").write_text('{"answer": "GOLD-ANSWER-77"}\n')
        (planted / "token").write_text("hf_planted_token")
        planted.chmod(0o755)
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(planted / "service.sock"))
        os.chmod(planted / "service.sock", 0o777)
        sock.listen(1)
        project = Path(__file__).resolve().parents[3]
        code = (
            "import os, socket\n"
            f"for p in [{str(planted / 'test.jsonl')!r}, {str(planted / 'token')!r}, "
            f"{str(project / 'pyproject.toml')!r}, {str(tmp_path)!r}]:\n"
            "    print(p, os.path.exists(p))\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            f"try:\n    s.connect({str(planted / 'service.sock')!r}); print('CONNECTED')\n"
            "except OSError as e:\n    print('socket', e.errno)\n"
            "print(sorted(os.listdir('/')))\n"
        )
        r = run(code)
        sock.close()
    finally:
        shutil.rmtree(planted)
    assert r.ok, r
    lines = r.stdout.splitlines()
    assert all(line.endswith(" False") for line in lines[:4]), lines
    assert "CONNECTED" not in r.stdout
    top = set(ast.literal_eval(lines[-1]))
    system = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev", "tmp"}
    assert top <= system | {Path(p).parts[1] for p in (sys.prefix, sys.base_prefix)}


def test_concurrent_runs_do_not_see_each_other():
    first: list = []
    t = threading.Thread(
        target=lambda: first.append(
            run(
                "import time\nopen('/tmp/hidden-tests.txt', 'w').write('assert f() == 1')\ntime.sleep(2)\nprint('done')",
                timeout_s=10,
            )
        )
    )
    t.start()
    import time

    time.sleep(0.8)
    second = run("import os\nprint(sorted(os.listdir('/tmp')))")
    t.join()
    assert first[0].ok and second.ok
    assert "hidden-tests" not in second.stdout


def test_scratch_size_is_capped():
    r = run(
        "f = open('/tmp/big', 'wb')\nfor _ in range(40):\n    f.write(b'x' * (1 << 20))\n    f.flush()\n"
        "print('wrote all')",
        scratch_mb=16,
        max_file_mb=100,
    )
    assert not r.ok and "wrote all" not in r.stdout and "No space left on device" in r.stderr


def test_unremovable_fallback_scratch_is_removed_when_not_root():
    out = as_nobody(
        """
        import json, os, tempfile
        from grouprl.rewards.sandbox.launchers import remove_tree
        d = tempfile.mkdtemp(prefix="grouprl-sbx-")
        os.makedirs(os.path.join(d, "a", "b"))
        open(os.path.join(d, "a", "b", "f"), "w").write("x")
        os.chmod(os.path.join(d, "a", "b"), 0)
        os.chmod(os.path.join(d, "a"), 0)
        remove_tree(d)
        print(json.dumps({"left": os.path.exists(d)}))
    """,
        env={"TMPDIR": "/tmp"},
    )
    assert out == {"left": False}
