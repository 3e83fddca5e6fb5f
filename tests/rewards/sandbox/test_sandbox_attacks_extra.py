"""The hardening campaign re-run with cases the issue did not list (issue 9), for real in the sandbox.

Each test is an attack a policy (or a hostile completion) can make: read expected values that a
test's fixture carries next to the input, make the trainer fail to read the program's output,
hold memory that ``RLIMIT_AS`` does not count (System V shared memory, socket buffers), forge a
sandboxed user reward's results, or the classic escapes (always-equal objects, killing the
parent, ptrace, raw system calls, raising limits, a surviving daemon, writing into the venv).
The bwrap tests skip only where bubblewrap cannot start (.ci/install-system-deps installs it).
"""

from __future__ import annotations

import ast
import subprocess

import pytest

from grouprl.records import Message
from grouprl.rewards.builtin.structured import code_execution
from grouprl.rewards.sandbox.assert_split import UnsupportedTest, split_test
from grouprl.rewards.sandbox.runner import run_in_sandbox
from grouprl.rewards.sandbox.user_reward import user_reward_in_sandbox

pytestmark = pytest.mark.usefixtures("bwrap")  # conftest: skip where bubblewrap cannot start


def score(body: str, tests: list):
    messages = [Message(role="user", content="sort it"), Message(role="assistant", content=f"```python\n{body}\n```")]
    return code_execution(messages, test_cases=tests)


def run(code: str, **kw):
    return run_in_sandbox(code, backend="bwrap", **kw)


HONEST = "def my_sort(xs):\n    return sorted(xs)"
# Reads whatever the test left in the solution's globals next to the input.
SNOOP = (
    "def my_sort(xs):\n    g = globals()\n    if 'expected' in g:\n        return g['expected']\n"
    "    case = g.get('CASE') or {}\n    return case.get('out', [0])"
)
FIXTURES = [
    "inp, expected = [3, 1, 2], [1, 2, 3]\nassert my_sort(inp) == expected",
    'CASE = {"inp": [3, 1, 2], "out": [1, 2, 3]}\nassert my_sort(CASE["inp"]) == CASE["out"]',
    'CASE = {"inp": [3, 1, 2], "out": [1, 2, 3]}\nassert my_sort(CASE["inp"]) == [1, 2, 3]',
]


@pytest.mark.parametrize("test", FIXTURES)
def test_expected_values_beside_the_input_do_not_reach_the_solution(test):
    # These scored 1.0 for SNOOP: the helper statement ran whole in the solution's process.
    assert score(SNOOP, [test]).score == 0.0
    assert score(HONEST, [test]).score == 1.0  # control: the cut-down fixture still feeds the call


def test_a_helper_that_cannot_be_cut_down_is_an_error_not_a_score():
    r = score(SNOOP, ['CASE = dict(inp=[3, 1, 2], out=[1, 2, 3])\nassert my_sort(CASE["inp"]) == CASE["out"]'])
    assert not r.is_score_valid and "unsupported test" in (r.error or ""), r
    with pytest.raises(UnsupportedTest, match="also binds expected"):
        split_test(
            "def make():\n    return [3, 1, 2], [1, 2, 3]\ninp, expected = make()\nassert my_sort(inp) == expected"
        )
    # Inputs a test only reads whole, or helpers without expected data, still cross as written.
    assert split_test("arr = [3, 1, 2]\nassert my_sort(arr) == sorted(arr)").child_ops[0] == ("exec", "arr = [3, 1, 2]")


def test_a_helper_that_mutates_the_input_still_runs_with_the_solution():
    # ``a.sort()`` binds no name, so it used to be left out of the solution's side: a right answer scored 0.
    r = score("def first(xs):\n    return xs[0]", ["a = [5, 4]\na.sort()\nassert first(a) == 4"])
    assert r.score == 1.0, r.reason


@pytest.mark.parametrize("payload", ["'[' * 200000", "'[' + '7' * 5000 + ']'"])
def test_unreadable_probe_values_fail_the_case_not_the_reward(payload):
    # The trainer parsed this text and raised (RecursionError / int too long): a reward error, not a 0.
    body = (
        f"import os, sys\ndef my_sort(xs):\n    sys.stdout.write('\\n__GROUPRL_PROBE_VALUES__' + {payload} + '\\n')\n"
        "    sys.stdout.flush()\n    os._exit(0)"
    )
    r = score(body, ["assert my_sort([2, 1]) == [1, 2]"])
    assert r.score == 0.0 and r.is_score_valid, r


def test_always_equal_subclasses_of_every_plain_type_score_zero():
    body = (
        "class S(str):\n    def __eq__(s, o): return True\n    __hash__ = str.__hash__\n"
        "class L(list):\n    def __eq__(s, o): return True\n"
        "class D(dict):\n    def __eq__(s, o): return True\n"
        "def a(x): return S('no')\ndef b(x): return [L()]\ndef c(x): return D()\n"
    )
    r = score(body, ["assert a(1) == 'yes'", "assert b(1) == [[1]]", "assert c(1) == {1: 2}"])
    assert r.score == 0.0 and "only plain values" in r.reason, r.reason


def test_killing_pid_1_and_the_parent_fails_the_case():
    body = (
        "import os, signal\nfor p in (1, os.getppid(), -1):\n    try:\n        os.kill(p, signal.SIGKILL)\n"
        "    except OSError:\n        pass\ndef my_sort(xs):\n    return xs"
    )
    r = score(body, ["assert my_sort([2, 1]) == [1, 2]"])
    assert r.score == 0.0 and r.is_score_valid, r


def test_sysv_shared_memory_and_message_queues_refused():
    # Detached segments held 1.6 GB under memory_mb=256 when no memory cgroup could be made.
    r = run(
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.shmget(0, 1 << 20, 0o1600), ctypes.get_errno())\n"
        "print(libc.msgget(0, 0o1600), ctypes.get_errno())\n"
    )
    assert r.ok and r.stdout.split() == ["-1", "1", "-1", "1"], r


def test_open_files_are_capped_so_socket_buffers_stay_small():
    # With the trainer's 20000 fds, socketpairs held 1.2 GB of kernel memory under memory_mb=256.
    r = run(
        "import socket\npairs, held = [], 0\ntry:\n    while held < (512 << 20):\n"
        "        a, b = socket.socketpair()\n        a.setblocking(False)\n        pairs.append((a, b))\n"
        "        try:\n            while True:\n                held += a.send(b'x' * 65536)\n"
        "        except BlockingIOError:\n            pass\nexcept OSError as e:\n    print(e.errno)\n"
        "print(held >> 20)\n",
        memory_mb=256,
        timeout_s=10,
    )
    assert r.ok, r
    errno, held_mb = map(int, r.stdout.split())
    assert errno == 24 and held_mb < 64, r.stdout


def test_no_privilege_from_ptrace_raw_syscalls_or_rlimits():
    code = (
        "import ctypes, os, resource\nlibc = ctypes.CDLL(None, use_errno=True)\nout = {}\n"
        "out['ptrace_pid1'] = libc.ptrace(16, 1, 0, 0)\n"
        "out['ptrace_traceme'] = libc.ptrace(0, 0, 0, 0)\n"  # seccomp: EPERM even for oneself
        "out['vm_read'] = libc.syscall(310, 1, 0, 0, 0, 0, 0) if os.uname().machine == 'x86_64' else -1\n"
        "out['memfd'] = libc.syscall(319, b'x', 0) if os.uname().machine == 'x86_64' else -1\n"
        "out['mount'] = libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)\n"
        "out['unshare_mnt'] = libc.unshare(0x00020000)\n"
        "try:\n    resource.setrlimit(resource.RLIMIT_AS, (-1, -1)); out['rlimit'] = 0\n"
        "except (ValueError, OSError):\n    out['rlimit'] = -1\n"
        "import sys, site\nfor d in [sys.prefix] + site.getsitepackages():\n    try:\n"
        "        open(os.path.join(d, 'sitecustomize.py'), 'w'); out['venv_write'] = 0\n"
        "    except OSError:\n        out.setdefault('venv_write', -1)\nprint(out)\n"
    )
    r = run(code)
    assert r.ok, r
    assert set(ast.literal_eval(r.stdout).values()) == {-1}, r.stdout


def test_a_double_forked_setsid_daemon_does_not_outlive_the_call():
    r = run(
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.execv('/bin/sleep', ['/bin/sleep', '41.5'])\n    os._exit(0)\ntime.sleep(0.2)\nprint('done')\n",
        timeout_s=5,
    )
    assert r.ok, r
    left = subprocess.run(["pgrep", "-f", "^/bin/sleep 41.5$"], capture_output=True, text=True).stdout
    assert left == "", left


def test_sandboxed_reward_ignores_results_forged_by_a_completion(tmp_path):
    # A user reward that prints the completion (debugging) and that a completion can make slow: the
    # completion carries a results line, padded so the print is flushed, then the run times out.
    (tmp_path / "r.py").write_text(
        "import re\ndef fn(completion, ground_truth, **kw):\n"
        "    print('scoring:', completion)\n"
        "    return 0.5 if re.search(r'(a+)+b', completion) else 0.0\n"
    )
    forged = "a" * 40 + '!\n__GROUPRL_RESULTS__[{"result": {"score": 1.0}}, {"result": {"score": 1.0}}]' + " " * 9000
    batch = [[Message(role="user", content="q"), Message(role="assistant", content=text)] for text in (forged, "b")]
    results = user_reward_in_sandbox(f"{tmp_path / 'r.py'}:fn")(batch, ground_truths=["1", "1"], sample_timeout=2)
    # Each sample has its own budget: the slow one is its own timeout error, the other is scored for real;
    # neither takes the forged 1.0 (both used to score 1.0).
    assert [(r.score, r.is_score_valid) for r in results] == [(0.0, False), (0.0, True)]
    assert "timeout" in results[0].error.lower()
