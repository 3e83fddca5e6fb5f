"""The package's and bench/'s imports form no circle, and no module of the package grows past 350 lines.

The walk reads every module's source (``ast``): imports at module level and inside functions count; imports
under ``if TYPE_CHECKING:`` count for circles (a type-only circle is still two modules that need each other's
names) and not for the floors (they never run; tests/layout/test_layering.py). ``from a import b`` is an edge to the
module ``a.b`` when that is a module, else to ``a``. A circle is a set of modules that reach each
other (a strongly connected component of two or more, or a module importing itself).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PACKAGE = "grouprl"
MAX_LINES = 350


def module_files(root: Path = SRC, package: str = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_only: bool = False):
    """Every Import/ImportFrom node; ``if TYPE_CHECKING:`` bodies only with ``type_only`` (their ``else`` always)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if not type_only and isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph(root: Path = SRC, package: str = PACKAGE, type_only: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of the same tree it imports (``type_only``: ``if TYPE_CHECKING:`` imports too)."""
    files = module_files(root, package)
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), str(path)), type_only):
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
                if target in files and target != package:
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


def _assert_no_circle(graph: dict[str, set[str]]) -> None:
    found = circles(graph)
    assert not found, "import circles (each line: modules that import each other):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_no_import_circle_type_only_imports_included():
    graph = import_graph(type_only=True)
    assert len(graph) > 100 and graph["grouprl.run_config"], "the walk found the package"
    _assert_no_circle(graph)


def test_no_import_circle_in_bench():
    graph = import_graph(ROOT, "bench", type_only=True)
    assert len(graph) > 5, "the walk found bench/"
    _assert_no_circle(graph)


def test_the_package_never_imports_bench_or_tests():
    found = [
        f"{path.relative_to(ROOT)} imports {alias}"
        for path in module_files().values()
        for node in _imports(ast.parse(path.read_text()), type_only=True)
        for alias in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if not node.level
            else []
        )
        if alias.split(".")[0] in {"bench", "tests", "experiments"}
    ]
    assert not found, "\n".join(found)


def test_a_type_only_circle_is_found(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n")
    (package / "b.py").write_text("from pkg.a import A\n")
    assert import_graph(tmp_path, "pkg") == {"pkg": set(), "pkg.a": set(), "pkg.b": {"pkg.a"}}
    assert circles(import_graph(tmp_path, "pkg", type_only=True)) == [["pkg.a", "pkg.b"]]


def test_config_imports_nothing_above_it():
    graph = import_graph()
    for name, targets in graph.items():
        if name == "grouprl.config" or name.startswith("grouprl.config."):
            outside = sorted(t for t in targets if not t.startswith("grouprl.config"))
            assert not outside, f"{name} imports {outside}: config/ sits at the bottom"


def test_no_module_over_350_lines():
    long = {
        str(p.relative_to(SRC)): n
        for p in module_files().values()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"
