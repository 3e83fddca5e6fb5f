"""The package's imports form no circle, and no module grows past 400 lines.

The walk reads every module's source (``ast``): imports at module level and inside functions count,
imports under ``if TYPE_CHECKING:`` do not (they never run). ``from a import b`` is an edge to the
module ``a.b`` when that is a module, else to ``a``. A circle is a set of modules that reach each
other (a strongly connected component of two or more, or a module importing itself).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "grouprl"
MAX_LINES = 400


def module_files() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node outside ``if TYPE_CHECKING:`` bodies (their ``else`` still runs)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative: from the module's package upwards
                    package = name.split(".") if is_package else name.split(".")[:-1]
                    package = package[: len(package) - node.level + 1]
                    base = ".".join(package + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names]
            for target in targets:
                while target and target not in files and "." in target:  # import a.b.c where c is an attribute
                    target = target.rpartition(".")[0]
                if target in files and target != PACKAGE:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of two or more modules, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_walk_sees_function_level_imports_and_skips_type_checking(tmp_path):
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\nelse:\n    import b\n"
        "def f():\n    import c\n"
    )
    assert sorted(alias.name for node in _imports(tree) for alias in node.names) == ["TYPE_CHECKING", "b", "c"]
    assert circles({"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"w"}, "v": set()}) == [["x", "y", "z"], ["w"]] or sorted(
        circles({"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"w"}, "v": set()})
    ) == [["w"], ["x", "y", "z"]]


def test_no_import_circle():
    graph = import_graph()
    assert len(graph) > 100 and graph["grouprl.run_config"], "the walk found the package"
    found = circles(graph)
    assert not found, "import circles (each line: modules that import each other):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_config_imports_nothing_above_it():
    graph = import_graph()
    for name, targets in graph.items():
        if name == "grouprl.config" or name.startswith("grouprl.config."):
            outside = sorted(t for t in targets if not t.startswith("grouprl.config"))
            assert not outside, f"{name} imports {outside}: config/ sits at the bottom"


def test_no_module_over_400_lines():
    long = {
        str(p.relative_to(SRC)): n
        for p in module_files().values()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"
