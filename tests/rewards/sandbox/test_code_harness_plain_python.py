"""code_execution judges what plain Python would, and always the solution's own definition.

Each honest program is also run as plain Python (solution, then the test, in one interpreter) and
the harness must agree with it. Names shared with builtins and standard-library modules are the
solution's; idiomatic standard-library values cross; nothing of the solution's own can forge a pass.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from grouprl.records import Message
from grouprl.rewards.builtin.structured import code_execution

pytestmark = pytest.mark.usefixtures("bwrap")


def score(body: str, tests: list[str]):
    messages = [Message(role="user", content="write it"), Message(role="assistant", content=f"```python\n{body}\n```")]
    return code_execution(messages, test_cases=tests)


def plain_python(body: str, tests: list[str]) -> float:
    passed = 0
    for test in tests:
        r = subprocess.run([sys.executable, "-c", body + "\n" + test], capture_output=True, timeout=60)
        passed += r.returncode == 0
    return passed / len(tests)


# --- the judged function shares a name with a builtin or a standard-library module ----------------

SHADOWING = {  # tests -> (correct program, wrong programs)
    "max": (
        ["assert max(3, 5) == 5", "assert max(-1, -7) == -1"],
        "def max(a, b):\n    return a if a > b else b",
        [
            "",
            "def max(a, b):\n    return a",
            "pass",
            "if False:\n    def max(a, b):\n        return 0",
            "def maximum(a, b):\n    return a if a > b else b",
        ],
    ),
    "abs": (
        ["assert abs(-3) == 3", "assert abs(4) == 4"],
        "def abs(x):\n    return -x if x < 0 else x",
        ["", "def abs(x):\n    return x", "import builtins\nx = 1"],
    ),
    "sorted": (
        ["assert sorted([3, 1, 2]) == [1, 2, 3]", "assert sorted([]) == []"],
        "def sorted(xs):\n    out = list(xs)\n    out.sort()\n    return out",
        ["", "def sorted(xs):\n    return xs"],
    ),
    "calendar": (
        ["assert calendar(2) == 4"],
        "def calendar(n):\n    return 2 * n",
        ["", "def calendar(n):\n    return n"],
    ),
    "math": (["assert math(3) == 9"], "def math(x):\n    return x * x", ["", "import math"]),
    "random": (["assert random([1, 2]) == 2"], "def random(xs):\n    return xs[-1]", ["", "import random"]),
}


@pytest.mark.parametrize("name", sorted(SHADOWING))
def test_the_solutions_own_definition_is_judged(name):
    tests, correct, wrongs = SHADOWING[name]
    good = score(correct, tests)
    assert good.score == 1.0 == plain_python(correct, tests), good.reason
    for wrong in wrongs:
        r = score(wrong, tests)
        if f"def {name}(" in wrong and not wrong.startswith("if False"):  # its own (wrong) max: as plain Python
            assert r.score == plain_python(wrong, tests) < 1.0, (name, wrong, r.reason)
        else:  # no definition of its own: plain Python would run the builtin or module and pass; never here
            assert r.score == 0.0 and r.is_score_valid, (name, wrong, r.reason)


def test_a_test_that_calls_nothing_of_the_solution_judges_nothing():
    r = score("def f(x):\n    return x", ["assert len([1, 2]) == 2"])
    assert r.score == 0.0 and "calls nothing the solution defines" in r.reason


# --- idiomatic standard-library values --------------------------------------------------------------

IDIOMATIC = [
    (
        "from collections import Counter\ndef count(s):\n    return Counter(s)",
        [
            "assert count('aab') == {'a': 2, 'b': 1}",
            "assert count('aab') == Counter({'a': 2, 'b': 1})",
            "assert count('aab').most_common(1) == [('a', 2)]",
            "assert count('')['z'] == 0",
        ],
    ),
    (
        "import collections\ndef groups(xs):\n    d = collections.defaultdict(list)\n    for x in xs:\n"
        "        d[x % 2].append(x)\n    return d",
        ["assert groups([1, 2, 3]) == {1: [1, 3], 0: [2]}", "assert groups([2])[0] == [2]"],
    ),
    (
        "from collections import namedtuple\nPoint = namedtuple('Point', 'x y')\ndef point(a, b):\n    return Point(a, b)",
        ["assert point(1, 2) == (1, 2)", "assert point(1, 2).y == 2", "p = point(3, 4)\nassert p.x + p.y == 7"],
    ),
    (
        "def evens(n):\n    for i in range(n):\n        if i % 2 == 0:\n            yield i",
        ["assert list(evens(5)) == [0, 2, 4]", "assert sum(evens(5)) == 6", "assert next(evens(5)) == 0"],
    ),
    ("def upto(n):\n    return range(n)", ["assert list(upto(3)) == [0, 1, 2]", "assert upto(3) == range(3)"]),
    ("def pairs(d):\n    return d.items()", ["assert sorted(pairs({'b': 1, 'a': 2})) == [('a', 2), ('b', 1)]"]),
    ("def squares(xs):\n    return map(lambda v: v * v, xs)", ["assert list(squares([1, 2])) == [1, 4]"]),
    (
        "from collections import deque\ndef last(xs, k):\n    return deque(xs, maxlen=k)",
        ["assert list(last([1, 2, 3], 2)) == [2, 3]"],
    ),
    (
        "from fractions import Fraction\ndef half(x):\n    return Fraction(x, 2)",
        ["assert half(1) == Fraction(1, 2)", "assert half(3) == 1.5"],
    ),
    (
        "from decimal import Decimal\ndef cents(x):\n    return Decimal(x) / 100",
        ["assert cents(150) == Decimal('1.5')"],
    ),
    (
        "import datetime\ndef next_day(d):\n    return d + datetime.timedelta(days=1)",
        ["import datetime\nassert next_day(datetime.date(2024, 2, 28)) == datetime.date(2024, 2, 29)"],
    ),
    (
        "def fact(n):\n    out = 1\n    for i in range(2, n + 1):\n        out *= i\n    return out",
        ["import math\nassert fact(2000) == math.factorial(2000)"],
    ),  # 5736 digits: past int()'s str limit
]


@pytest.mark.parametrize("body, tests", IDIOMATIC, ids=[b.splitlines()[-2].strip()[:30] for b, _ in IDIOMATIC])
def test_idiomatic_standard_library_values_are_judged_as_plain_python_does(body, tests):
    r = score(body, tests)
    assert r.score == plain_python(body, tests) == 1.0, r.reason


# --- what a solution of its own cannot make cross -------------------------------------------------

FORGERIES = [
    # its own "namedtuple": a tuple subclass with _fields and an __eq__ that says yes
    (
        "class P(tuple):\n    _fields = ('x', 'y')\n    def __eq__(self, other):\n        return True\n"
        "def point(a, b):\n    return P((9, 9))",
        ["assert point(1, 2) == (1, 2)"],
    ),
    # its own Counter class under the standard name
    (
        "class Counter(dict):\n    def __eq__(self, other):\n        return True\ndef count(s):\n    return Counter()",
        ["assert count('aab') == {'a': 2, 'b': 1}"],
    ),
    # patching the standard library the test uses for its expected value
    ("import math\nmath.factorial = lambda n: 0\ndef fact(n):\n    return 0", ["assert fact(5) == math.factorial(5)"]),
    (
        "from collections import Counter\nCounter.__eq__ = lambda self, other: True\ndef count(s):\n    return Counter()",
        ["assert count('aab') == Counter({'a': 2, 'b': 1})"],
    ),
    # a generator whose items are objects of its own
    (
        "class Yes:\n    def __eq__(self, other):\n        return True\ndef evens(n):\n    yield Yes()",
        ["assert list(evens(3)) == [0, 2]"],
    ),
    # an error text with line separators and a superscript digit, to confuse the verdict parser
    ("def f(x):\n    raise ValueError('\\u2028\\u00b2:pass\\r0:pass\\n0:pass')", ["assert f(1) == 1"]),
]


@pytest.mark.parametrize("body, tests", FORGERIES)
def test_nothing_of_the_solutions_own_forges_a_pass(body, tests):
    r = score(body, tests)
    assert r.score == 0.0 and r.is_score_valid, r.reason
