"""Tool calls in a session: errors become answers and are classified; the sandboxed python tool keeps
per-episode state and sees neither the host nor another episode."""

import os
import time

import pytest

from grouprl.rewards.sandbox.runner import bwrap_available
from grouprl.tools import ToolCall, ToolSession, make_tool, resolve_tools


def slow(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return "woke"


def broken(x: int) -> str:
    """Fail.

    Args:
        x: anything
    """
    raise RuntimeError(f"no {x}")


def session(timeout_s=5.0):
    return ToolSession(resolve_tools(["calculator", "lookup"]) + [make_tool(slow), make_tool(broken)], timeout_s)


def test_a_good_call_answers_and_errors_are_answers_with_a_kind():
    s = session(timeout_s=0.5)
    assert s.call(ToolCall("calculator", {"expression": "4821 * 97"}, "c0")).content == "467637"
    cases = {
        "unknown_tool": ToolCall("calc", {"expression": "1"}),
        "bad_arguments": ToolCall("lookup", {"units": "mile"}),
        "raised": ToolCall("broken", {"x": 3}),
        "timeout": ToolCall("slow", {"seconds": 3}),
    }
    for kind, call in cases.items():
        start = time.perf_counter()
        outcome = s.call(call)
        assert outcome.error == kind and outcome.content.startswith("Error: "), (kind, outcome)
        assert time.perf_counter() - start < 2
    assert "no 3" in s.call(cases["raised"]).content
    message = s.call(ToolCall("lookup", {"unit": "feet"}, "c9")).as_message()
    assert message == {"role": "tool", "content": "1 foot = 12 inches", "name": "lookup", "tool_call_id": "c9"}


needs_bwrap = pytest.mark.skipif(not bwrap_available()[0], reason="bubblewrap unavailable here")


@needs_bwrap
def test_python_tool_keeps_state_within_an_episode_only(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    first, second = (ToolSession(resolve_tools(["python"]), timeout_s=10, sandbox_backend="bwrap") for _ in range(2))
    assert first.call(ToolCall("python", {"code": "x = 6 * 7\ndef twice(v):\n    return 2 * v"})).error is None
    assert first.call(ToolCall("python", {"code": "print('x is', x)\ntwice(x)"})).content == "x is 42\n84"
    other = second.call(ToolCall("python", {"code": "x"}))
    assert other.error == "raised" and "NameError" in other.content
    host = first.call(ToolCall("python", {"code": f"open({str(secret)!r}).read()"}))
    assert host.error == "raised" and "No such file" in host.content
    env = first.call(
        ToolCall("python", {"code": "import os; sorted(k for k in os.environ if 'TOKEN' in k or 'KEY' in k)"})
    )
    assert env.content == "[]"
    # a failed cell is not replayed: the next call still has x
    assert first.call(ToolCall("python", {"code": "1/0"})).error == "raised"
    assert first.call(ToolCall("python", {"code": "x + 1"})).content == "43"


@needs_bwrap
def test_python_tool_timeout_kills_the_cell():
    s = ToolSession(resolve_tools(["python"]), timeout_s=1, sandbox_backend="bwrap")
    start = time.perf_counter()
    outcome = s.call(ToolCall("python", {"code": "while True:\n    pass"}))
    assert outcome.error == "timeout" and time.perf_counter() - start < 5
    assert s.call(ToolCall("python", {"code": "'still alive'"})).content == "'still alive'"


@needs_bwrap
def test_a_users_file_tool_in_the_sandbox(tmp_path):
    path = tmp_path / "peek.py"
    path.write_text(
        'import os\n\ndef peek(path: str) -> str:\n    """Read a file.\n\n    Args:\n'
        '        path: which\n    """\n    print("noise")\n    return open(path).read()\n'
    )
    (tmp_path / "data.txt").write_text("on the host")
    inside = ToolSession(
        resolve_tools([f"{path}:peek"], sandbox_user_tools=True), timeout_s=10, sandbox_backend="bwrap"
    )
    outcome = inside.call(ToolCall("peek", {"path": str(tmp_path / "data.txt")}))
    assert outcome.error == "raised" and "No such file" in outcome.content
    trusted = ToolSession(resolve_tools([f"{path}:peek"]), timeout_s=10)
    assert trusted.call(ToolCall("peek", {"path": str(tmp_path / "data.txt")})).content == "on the host"


def stall(seconds: float) -> str:
    """Never answer in time.

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return "late"


def test_stalled_in_process_calls_take_no_shared_slot_and_builtins_keep_answering():
    """Twenty calls to a tool that stalls (more than any worker pool): each is a timeout error, the
    calculator still answers at once after them, and the stalled calls are counted, up to a bound."""
    from grouprl.tools.execution import MAX_STALLED_PER_TOOL, stalled_calls

    s = ToolSession(resolve_tools(["calculator"]) + [make_tool(stall)], timeout_s=0.2)
    for _ in range(20):
        assert s.call(ToolCall("stall", {"seconds": 30})).error == "timeout"
    start = time.perf_counter()
    assert s.call(ToolCall("calculator", {"expression": "6 * 7"})).content == "42"
    assert time.perf_counter() - start < 0.5
    assert stalled_calls("stall") == MAX_STALLED_PER_TOOL  # past the bound the tool is not called again
    refused = s.call(ToolCall("stall", {"seconds": 0}))
    assert refused.error == "timeout" and "never returned" in refused.content


def test_a_process_with_a_stalled_tool_call_exits(tmp_path):
    """A trainer whose tool hangs forever must still exit when its work is done."""
    import subprocess
    import sys

    program = (
        "import time\n"
        "from grouprl.tools import ToolCall, ToolSession, make_tool\n"
        "def hang(x: int) -> str:\n"
        "    '''Hang.\n\n    Args:\n        x: anything\n    '''\n"
        "    time.sleep(3600)\n"
        "s = ToolSession([make_tool(hang)], timeout_s=0.2)\n"
        "print(s.call(ToolCall('hang', {'x': 1})).error, flush=True)\n"
    )
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "timeout", done.stderr[-500:]
    assert time.perf_counter() - start < 30


MARKER_TOOL = '''import json, os
try:  # at import: a file on the host, which only the trainer's process can write
    with open({marker!r}, "w") as out:
        out.write(str(os.getpid()))
except OSError:
    pass


def probe(x: int) -> str:
    """Say where it runs.

    Args:
        x: anything
    """
    return json.dumps({{"pid": os.getpid(), "host_visible": os.path.isdir({host_dir!r})}})
'''


@needs_bwrap
def test_tool_sandbox_runs_no_user_tool_code_in_the_trainer_in_any_naming_form(tmp_path, monkeypatch):
    """tool_sandbox: true means what sandbox_user_rewards means: a file's tool is never imported here
    (not even to read its schema), it runs in the sandbox; forms that would be imported are refused."""
    import json
    import py_compile
    import sys

    marker = tmp_path / "imported_in_the_trainer"
    source = MARKER_TOOL.format(marker=str(marker), host_dir=str(tmp_path))
    (tmp_path / "sub" / "dir").mkdir(parents=True)
    for where in ("marker_tool.py", "sub/dir/marker_tool.py", "sub/marker_tool", "marker_mod.py"):
        (tmp_path / where).write_text(source)
    py_compile.compile(str(tmp_path / "marker_tool.py"), cfile=str(tmp_path / "marker_tool.pyc"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    modules_before = set(sys.modules)
    sandboxed = [f"{tmp_path}/marker_tool.py:probe", "marker_tool.py:probe", "sub/dir/marker_tool.py:probe"]
    for spec in sandboxed:
        outcome = ToolSession(resolve_tools([spec], sandbox_user_tools=True), timeout_s=20).call(
            ToolCall("probe", {"x": 1})
        )
        assert outcome.error is None, (spec, outcome)
        seen = json.loads(outcome.content)
        assert seen["pid"] != os.getpid() and not seen["host_visible"], (spec, seen)
    refused = ["marker_mod:probe", f"{tmp_path}/marker_tool.pyc:probe", "sub/marker_tool:probe"]
    for spec in refused:
        with pytest.raises(KeyError, match="tool_sandbox is on"):
            resolve_tools([spec], sandbox_user_tools=True)
    assert not marker.exists(), f"user tool code ran in the trainer (pid {marker.read_text()})"
    assert not {m for m in set(sys.modules) - modules_before if "marker" in m or m.startswith("grouprl_user")}
    # a grouprl module is the trainer's own code: still resolved in-process
    assert resolve_tools(["grouprl.tools.builtin:lookup"], sandbox_user_tools=True)[0].name == "lookup"
