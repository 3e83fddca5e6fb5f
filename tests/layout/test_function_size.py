"""Functions stay readable: none in src/ over 60 lines, none in train/ over 50, and Learner.update (the
update's table of contents, CleanRL-style) at most 40."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "grouprl"
TRAIN = PACKAGE / "train"


def _functions(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.end_lineno - node.lineno + 1  # type: ignore[operator]


def test_no_function_in_src_is_over_60_lines():
    long = [
        f"{path.relative_to(PACKAGE)}:{name} ({lines} lines)"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, lines in _functions(path)
        if lines > 60
    ]
    assert not long, "functions in src/ over 60 lines: " + ", ".join(long)


def test_no_function_in_train_is_over_50_lines():
    long = [
        f"{path.name}:{name} ({lines} lines)"
        for path in sorted(TRAIN.rglob("*.py"))
        for name, lines in _functions(path)
        if lines > 50
    ]
    assert not long, "functions in train/ over 50 lines: " + ", ".join(long)


def test_the_learners_update_reads_in_40_lines():
    lengths = dict(_functions(TRAIN / "learner.py"))
    assert lengths["update"] <= 40, f"Learner.update is {lengths['update']} lines (at most 40)"


def test_the_check_measures_what_it_says(tmp_path):
    body = "\n".join(f"    x = {i}" for i in range(60))
    (tmp_path / "m.py").write_text(f"def long():\n{body}\n")
    assert dict(_functions(tmp_path / "m.py"))["long"] == 61
