""" "name, or ``path/to/file.py:function``, or ``package.module:function``" is read in one place.

``user_code.code_ref`` splits such a name and ``registry.Registry.resolve`` looks it up; every other
module asks them. The walk reads every module's source (``ast``) and flags what reading such a name by
hand looks like: splitting a string on ``":"`` (``partition``, ``rpartition``, ``split``, ``rsplit``),
testing ``":" in name``, and ``.endswith(".py")``. Two modules split lines that are not names of code.
"""

from __future__ import annotations

import ast

from test_import_graph import SRC, module_files

THE_ONE_READER = "grouprl.user_code"
NOT_CODE_NAMES = {
    "grouprl.rewards.sandbox.cgroup": "lines of /proc/self/cgroup (hierarchy:controllers:path)",
    "grouprl.rewards.sandbox.code_harness": "the test harness's result lines (case:verdict)",
}
SPLITS = ("partition", "rpartition", "split", "rsplit")


def hand_readings(source: str) -> list[str]:
    """Every expression in ``source`` that reads a name of code by hand."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            first = node.args[0]
            text = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
            if text is not None and (
                (node.func.attr in SPLITS and ":" in text) or (node.func.attr == "endswith" and text == ".py")
            ):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and node.left.value == ":":
            if any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
                found.append(ast.unparse(node))
    return found


def test_the_walk_sees_every_hand_reading():
    source = (
        'a, _, b = spec.rpartition(":")\nwhere = spec.split(":", 1)[0]\nif ":" in name: pass\n'
        'if ":" not in name: pass\nfile = where.endswith(".py")\nok = name.split(".")\n'
    )
    assert sorted(hand_readings(source)) == [
        "':' in name",
        "':' not in name",
        "spec.rpartition(':')",
        "spec.split(':', 1)",
        "where.endswith('.py')",
    ]


def test_names_of_code_are_read_only_by_user_code():
    files = module_files()
    assert THE_ONE_READER in files and hand_readings(files[THE_ONE_READER].read_text())
    by_hand = {
        name: found
        for name, path in files.items()
        if name != THE_ONE_READER and name not in NOT_CODE_NAMES and (found := hand_readings(path.read_text()))
    }
    assert not by_hand, (
        "read 'name or path:function' with user_code.code_ref / Registry.resolve instead:\n"
        + "\n".join(f"{SRC / files[n].relative_to(SRC)}: {f}" for n, f in by_hand.items())
    )
    for name in NOT_CODE_NAMES:  # an exception that no longer needs to be one is removed from the list
        assert hand_readings(files[name].read_text()), name
