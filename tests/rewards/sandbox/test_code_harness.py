"""Reward-integrity attacks on ``code_execution`` with assert tests, run for real in the sandbox.

Each program below is what a policy under RL finds: exit early, read the tests, return an
object that equals everything, forge the harness's output. None may score. The bwrap tests skip
only where bubblewrap cannot start here (.ci/install-system-deps installs it).
"""

from __future__ import annotations

import pytest

from grouprl.records import Message
from grouprl.rewards.sandbox import runner as sandbox
from grouprl.rewards.builtin.structured import code_execution
from grouprl.rewards.sandbox.assert_split import UnsupportedTest, split_test

TESTS = ["assert square(3) == 9", "assert square(-4) == 16", "assert sorted([square(2), 0]) == [0, 4]"]


pytestmark = pytest.mark.usefixtures("bwrap")  # conftest: skip where bubblewrap cannot start


def score(body: str, tests=TESTS, **kw):
    messages = [
        Message(role="user", content="write square"),
        Message(role="assistant", content=f"```python\n{body}\n```"),
    ]
    return code_execution(messages, test_cases=tests, **kw)


def test_honest_solution_passes_and_wrong_one_fails():
    good = score("def square(x):\n    return x * x")
    assert good.score == 1.0 and good.is_score_valid, good.reason
    bad = score("def square(x):\n    return x + x")  # right only for x = 2 (case 2 still fails via 0)
    assert bad.score == pytest.approx(1 / 3), bad.reason
    assert "assert failed" in bad.metrics["case_0"].reason


@pytest.mark.parametrize(
    "exit_call",
    [
        "import os\nos._exit(0)",
        "import sys\nsys.exit(0)",
        "raise SystemExit",
        "import atexit, os\natexit.register(lambda: print('ok'))\nraise SystemExit(0)",
    ],
)
def test_early_exit_scores_zero(exit_call):
    r = score(f"def square(x):\n    return 0\n{exit_call}")
    assert r.score == 0.0 and r.is_score_valid, r.reason
    assert "exited before its tests ran" in r.metrics["case_0"].reason


def test_exit_from_inside_the_called_function_scores_zero():
    r = score("import os\ndef square(x):\n    os._exit(0)")
    assert r.score == 0.0, r.reason


def test_always_equal_object_scores_zero():
    body = (
        "class Anything(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "class Blob:\n    def __eq__(self, other):\n        return True\n    def __lt__(self, other):\n"
        "        return True\n    def __bool__(self):\n        return True\n"
        "def square(x):\n    return Anything(0) if x > 0 else Blob()"
    )
    r = score(body)
    assert r.score == 0.0, r.reason
    assert "only plain values" in r.reason


LEAK = (
    "import gc, os, re, sys\n"
    "PAT = re.compile('zq-expected-[0-9]+')\n"
    "def leak(*args):\n"
    "    texts = [sys.stdin.read(), repr(dict(os.environ)), repr(sys.argv)]\n"
    "    for root in ['/tmp', '/dev/shm', '/etc', '/proc/self']:\n"
    "        for d, dirs, files in os.walk(root):\n"
    "            dirs[:] = [x for x in dirs if x not in ('task', 'net')]\n"
    "            for f in files:\n"
    "                try:\n"
    "                    texts.append(open(os.path.join(d, f), errors='ignore').read(1 << 20))\n"
    "                except Exception:\n"
    "                    pass\n"
    "    texts += [o for o in gc.get_objects() if isinstance(o, str)]\n"
    "    frame = sys._getframe(1)\n"
    "    while frame is not None:  # every caller's variables: the harness's own state in this process\n"
    "        texts.append(repr(frame.f_locals) + repr(frame.f_code.co_consts))\n"
    "        frame = frame.f_back\n"
    "    found = [m.group(0) for t in texts for m in PAT.finditer(t)]\n"
    "    return found[0] if found else 'nothing found'\n"
)


def test_expected_values_are_in_no_file_input_or_memory_of_the_solution():
    # The solution searches files, stdin, environment, argv and its heap for the expected value.
    r = score(LEAK, tests=["assert leak() == 'zq-expected-4471'"])
    assert r.score == 0.0, r.reason
    # Control: the same search does find a value the test hands to the solution (a call argument).
    control = score(LEAK, tests=["assert leak('zq-expected-4471') == 'zq-expected-4471'"])
    assert control.score == 1.0, control.reason


def test_forged_harness_output_does_not_pass():
    # Prints what a pass looks like in the judge's protocol and a probe marker with a guess.
    body = (
        "import os\n"
        "def square(x):\n"
        "    print('0:pass'); print('deadbeef:0:pass')\n"
        "    print('\\n__GROUPRL_PROBE_VALUES__[{\"v\": 1}]')\n"
        "    os._exit(0)\n"
    )
    r = score(body)
    assert r.score == 0.0, r.reason


def test_unsupported_test_is_an_error_not_a_score():
    r = score(
        "def square(x):\n    return x * x", tests=["def check(candidate):\n    assert candidate(2) == 4\ncheck(square)"]
    )
    assert not r.is_score_valid and r.error and "unsupported test" in r.error
    with pytest.raises(UnsupportedTest):
        split_test("assert all(square(i) == i * i for i in range(3))")


def test_helpers_and_stdlib_in_tests_work():
    tests = [
        "import math\nassert math.isclose(root(2.0) ** 2, 2.0)",
        "xs = [1.0, 4.0, 9.0]\nexpected = [1.0, 2.0, 3.0]\nassert roots(xs) == expected",
    ]
    r = score(
        "import math\ndef root(x):\n    return math.sqrt(x)\ndef roots(xs):\n    return [root(v) for v in xs]",
        tests=tests,
    )
    assert r.score == 1.0, r.reason
    # The expected list never reaches the solution's side; the input list does.
    child = split_test(tests[1]).child_ops
    assert ("exec", "xs = [1.0, 4.0, 9.0]") in child and not any("expected" in src for _, src in child)


def test_sandbox_that_cannot_start_is_an_error_not_zero():
    # 1 MB of address space: the sandbox itself cannot start, so no test ran: an error, counted.
    before = sandbox.SANDBOX_INFRA_ERRORS
    r = score("def square(x):\n    return x * x", memory_mb=1)
    assert not r.is_score_valid and "could not start the program" in (r.error or ""), r
    assert sandbox.SANDBOX_INFRA_ERRORS > before
