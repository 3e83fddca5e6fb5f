"""A test harness for assert-style code tests that the tested program cannot short-circuit.

Appending ``assert f(2) == 4`` to the program and counting "exit 0" as a pass rewards a program
that calls ``os._exit(0)``, reads its own file, returns an always-equal object or patches ``print``.
Whatever runs in the program's process is the program's, so the verdict is made elsewhere:

1. Each test is split (``split_test``) into what must run with the solution and what must not.
   ``assert sorted(f(x)) == [1, 2]`` becomes the *probe* ``f(x)`` (a value computed by the
   solution's code) and the *check* ``sorted(V0) == [1, 2]``. A name the solution defines is
   the solution's, always, even when it is also a builtin or a standard-library module's name
   (``max``, ``sorted``, ``calendar``): plain Python would call the solution's, and a solution
   that does not define it fails instead of being judged by the builtin. Other names the test
   does not define, that are not builtins and not standard-library modules, are the solution's
   too; its standard-library imports (``from collections import Counter``) are repeated on the
   judge's side. Test helpers the probes need cross cut down to what the probes read
   (``_child_data``). A test that calls nothing of the solution's judges nothing: it fails.
2. The solution runs in one sandbox with only the probes (``programs/probe.py``): it prints the
   probes' values as plain data after a marker: None, bool, int, float, str, bytes, list,
   tuple, dict, set, and the standard library's own types (Counter, defaultdict, namedtuple,
   deque, range, iterators, Decimal, Fraction, dates), exact types, rebuilt fresh by the judge,
   so no object of its own can cross. The expected values are in no file and no input it can
   see; an early exit leaves no values, which fails the case.
3. A second sandbox runs only the checks on the decoded values (``programs/judge.py``), with no
   solution code in it. It receives a fresh per-run secret on stdin after every solution run
   has ended, and prints ``secret:case:pass`` only after a case's last assert held.

Tests the split cannot express safely (a solution value inside a lambda/comprehension variable,
an ``assert`` inside code that must run with the solution, e.g. HumanEval's ``check(candidate)``,
a helper holding both inputs and expected values) raise ``UnsupportedTest``: an error, never a score.
"""

from __future__ import annotations

import ast
import builtins
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

MARK = "__GROUPRL_PROBE_VALUES__"
_V = "__grouprl_v"
_BUILTINS = set(dir(builtins))
_STDLIB = set(getattr(sys, "stdlib_module_names", ()))
_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_NOT_LITERAL = object()
_EVAL_ERRORS = (ValueError, TypeError, SyntaxError, MemoryError, RecursionError)


class UnsupportedTest(ValueError):
    """A test the harness cannot split into probes and checks without trusting the solution."""


@dataclass
class SplitTest:
    child_ops: list[tuple[str, str]] = field(default_factory=list)  # ("exec"|"eval", source)
    judge_ops: list[tuple[str, str, list[int]]] = field(default_factory=list)  # (kind, source, values used)
    modules: set[str] = field(default_factory=set)  # stdlib modules the test names without importing
    setup: list[str] = field(default_factory=list)  # the solution's stdlib imports the checks name, for the judge
    required: set[str] = field(default_factory=set)  # builtin names the solution must define itself

    @property
    def probe_count(self) -> int:
        return sum(kind == "eval" for kind, _ in self.child_ops)


def _bound_names(node: ast.AST) -> set[str]:
    names: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.arg):
            names.add(n.arg)
    return names


def _loaded(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


class _Probes(ast.NodeTransformer):
    """Replaces the smallest sub-expressions that need the solution by ``__grouprl_v[i]``."""

    def __init__(self, tainted: set[str], first_index: int):
        self.tainted, self.first = tainted, first_index
        self.sources: list[str] = []
        self.scope_bound: list[set[str]] = []

    def _needs_solution(self, node: ast.AST) -> bool:
        return bool(_loaded(node) & self.tainted)

    def _probe(self, node: ast.expr) -> ast.expr:
        bound = set().union(*self.scope_bound) if self.scope_bound else set()
        if _loaded(node) & bound:
            raise UnsupportedTest(
                f"'{ast.unparse(node)}' calls the solution with a lambda/comprehension "
                "variable; write one assert per value"
            )
        self.sources.append(ast.unparse(node))
        index = self.first + len(self.sources) - 1
        return ast.Subscript(value=ast.Name(id=_V, ctx=ast.Load()), slice=ast.Constant(index), ctx=ast.Load())

    def visit(self, node):
        if not self._needs_solution(node):
            return node
        if isinstance(node, ast.Name):
            return self._probe(node)
        if isinstance(node, ast.Call) and self._needs_solution(node.func):
            return self._probe(node)
        if isinstance(node, (ast.Attribute, ast.Subscript)) and self._needs_solution(node.value):
            return self._probe(node)
        if isinstance(node, _SCOPES):
            self.scope_bound.append(_bound_names(node))
            try:
                return self.generic_visit(node)
            finally:
                self.scope_bound.pop()
        return self.generic_visit(node)  # keywords, comprehension clauses, operators...


def solution_bindings(solution: str) -> tuple[set[str], dict[str, str]]:
    """The names the solution binds at module level: (its own definitions, its standard-library
    imports as ``name -> import statement``). A solution that does not parse binds nothing."""
    try:
        tree = ast.parse(solution)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set(), {}
    own: set[str] = set()
    imports: dict[str, str] = {}
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
            todo.extend(node.decorator_list)
            own.update(n for inner in ast.walk(node) if isinstance(inner, ast.Global) for n in inner.names)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.comprehension):  # its target is the comprehension's own variable
            todo.extend([node.iter, *node.ifs])
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            root = node.module.split(".")[0] if isinstance(node, ast.ImportFrom) and node.module else ""
            for alias in node.names:
                bound = (alias.asname or alias.name).split(".")[0]
                source = alias.name.split(".")[0] if isinstance(node, ast.Import) else root
                plain = isinstance(node, ast.Import) and alias.asname is None
                stdlib = source in _STDLIB and not getattr(node, "level", 0) and alias.name != "*"
                if stdlib and (plain or isinstance(node, ast.ImportFrom) or alias.asname):
                    one = type(node)(**{**{f: getattr(node, f) for f in node._fields}, "names": [alias]})
                    imports[bound] = ast.unparse(one)
                else:
                    own.add(bound)
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            own.add(node.id)
        todo.extend(ast.iter_child_nodes(node))
    return own, {k: v for k, v in imports.items() if k not in own}


def split_test(source: str, solution: str = "") -> SplitTest:
    """Split one test (``assert ...`` lines and helper statements) into probes and checks; the names
    ``solution`` defines are its own (see the module docstring)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise UnsupportedTest(f"test does not parse: {err.msg} (line {err.lineno})") from None
    tree.body = [part for stmt in tree.body for part in _split_unpacking(stmt)]
    defined = set().union(*(_bound_names(s) for s in tree.body)) if tree.body else set()
    free = set().union(*(_loaded(s) for s in tree.body)) if tree.body else set()
    own, imports = solution_bindings(solution)
    outside = free - defined
    tainted = {n for n in outside if n in own or (n not in _BUILTINS and n not in _STDLIB and n not in imports)}
    out = SplitTest(
        modules={n for n in outside - tainted if n in _STDLIB and n not in imports},
        setup=[imports[n] for n in sorted(outside & set(imports))],
        required=tainted & _BUILTINS,
    )
    # Statements, in order: ("child", stmt) needs the solution; ("judge", stmt) does not.
    placed: list[tuple[str, ast.stmt]] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assert):
            placed.append(("assert", stmt))
        elif _loaded(stmt) & tainted:
            if any(isinstance(n, ast.Assert) for n in ast.walk(stmt)):
                raise UnsupportedTest(
                    f"'{_first_line(stmt)}' asserts inside code that runs with the solution "
                    "(e.g. check(candidate)); write the asserts at the top level"
                )
            tainted |= _bound_names(stmt)
            placed.append(("child", stmt))
        else:
            placed.append(("judge", stmt))
    # Helper statements the probes depend on run on both sides (they hold no solution values).
    needed = set().union(*(_loaded(s) for kind, s in placed if kind == "child")) if placed else set()
    probes_count = 0
    child_side: list[tuple[str, str | ast.stmt]] = []  # ("eval" | "exec", source) or ("helper", statement)
    for kind, stmt in placed:
        if isinstance(stmt, ast.Assert):  # placed as "assert"
            probes = _Probes(tainted, probes_count)
            check = probes.visit(stmt.test)
            for src in probes.sources:
                child_side.append(("eval", src))
                needed |= _loaded(ast.parse(src, mode="eval"))
            used = list(range(probes_count, probes_count + len(probes.sources)))
            probes_count += len(probes.sources)
            out.judge_ops.append(("assert", ast.unparse(check), used))
        elif kind == "child":
            child_side.append(("exec", ast.unparse(stmt)))
        else:
            out.judge_ops.append(("exec", ast.unparse(stmt), []))
            child_side.append(("helper", stmt))  # resolved below once all needs are known
    kept: list[tuple[str, str | ast.stmt]] = []
    for kind, item in reversed(child_side):  # backwards, so a helper's own needs are seen in time
        if isinstance(item, str):  # an eval or exec source; helpers are statements
            kept.append((kind, item))
        elif _bound_names(item) & needed or not _bound_names(item) and _loaded(item) & needed:  # or xs.sort()
            if any(isinstance(n, ast.Assert) for n in ast.walk(item)):
                raise UnsupportedTest(f"'{_first_line(item)}' is needed by the solution's side but asserts")
            needed |= _loaded(item)
            kept.append(("helper", item))
    out.child_ops = _child_data(kept[::-1], needed, out.judge_ops)
    return out


# A helper the probes need runs with the solution: all it holds is visible there (globals(), gc, the file).
# So ``a, b = x, y`` is split in two; a literal ``CASE = {"inp": ..., "out": ...}`` read as ``CASE["inp"]``
# crosses as ``{"inp": ...}``; one that cannot be cut down while the checks read more of it is unsupported.


def _split_unpacking(stmt: ast.stmt) -> list[ast.stmt]:
    """``a, b = x, y`` as ``a = x`` and ``b = y`` (when no right-hand side reads a target)."""
    if not (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], (ast.Tuple, ast.List))
        and isinstance(stmt.value, (ast.Tuple, ast.List))
    ):
        return [stmt]
    targets, values = stmt.targets[0].elts, stmt.value.elts
    names = [n for n in targets if isinstance(n, ast.Name)]
    if (
        len(names) != len(values)
        or len(names) != len(targets)
        or any(isinstance(v, ast.Starred) for v in values)
        or {n.id for n in names} & set().union(*(_loaded(v) for v in values))
    ):
        return [stmt]
    return [
        ast.Assign(targets=[ast.Name(id=n.id, ctx=ast.Store())], value=v, lineno=stmt.lineno)
        for n, v in zip(names, values)
    ]


def _read_paths(trees: list[ast.AST], name: str) -> set[tuple]:
    """The subscript paths by which ``trees`` read ``name``: ``CASE["inp"]`` is ``("inp",)``, a read
    of the whole value is ``()``, a computed index is ``None`` (``CASES[i][0]``: ``(None, 0)``)."""
    paths: set[tuple] = set()
    for tree in trees:
        parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                path: list[int | str | bytes | float | None] = []
                cur: ast.AST = node
                while isinstance(up := parent.get(cur), ast.Subscript) and up.value is cur:
                    cur = up
                    key = _literal(up.slice)
                    path.append(key if isinstance(key, (int, str, bytes, float)) else None)
                paths.add(tuple(path))
    return paths


def _prune(value, paths: set[tuple]):
    """``value`` with only what ``paths`` read (other dict keys dropped, other items None), or
    ``_NOT_LITERAL`` where it cannot be cut down so (a string read by index, say)."""
    if () in paths:
        return value
    out: object  # the pruned dict, list or tuple; items: its values
    items: Iterable[Any]
    if isinstance(value, dict):
        parts = {
            k: _prune(v, {p[1:] for p in paths if p[0] is None or p[0] == k})
            for k, v in value.items()
            if any(p[0] is None or p[0] == k for p in paths)
        }
        out, items = parts, parts.values()
    elif isinstance(value, (list, tuple)) and all(p[0] is None or type(p[0]) is int for p in paths):
        kept = [{p[1:] for p in paths if p[0] is None or p[0] in (i, i - len(value))} for i in range(len(value))]
        out = items = type(value)(_prune(v, k) if k else None for v, k in zip(value, kept))
    else:
        return _NOT_LITERAL
    return _NOT_LITERAL if any(x is _NOT_LITERAL for x in items) else out


def _child_data(ops: list[tuple], needed: set[str], judge_ops: list) -> list[tuple[str, str]]:
    """The child's ops with each helper cut down to what the solution's side reads (see above)."""
    child_trees = [
        item if kind == "helper" else ast.parse(item, mode="eval" if kind == "eval" else "exec") for kind, item in ops
    ]
    judge_trees = [ast.parse(src) for _, src, _ in judge_ops]
    result: list[tuple[str, str]] = []
    for kind, item in ops:
        if kind != "helper":
            result.append((kind, item))
            continue
        if isinstance(item, (ast.Assign, ast.AnnAssign)):
            targets = item.targets if isinstance(item, ast.Assign) else [item.target]
            bound = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            extra = {n for n in bound - needed if _read_paths(judge_trees, n)}
            if extra:
                raise UnsupportedTest(
                    f"'{_first_line(item)}' is needed by the solution's side and also binds "
                    f"{', '.join(sorted(extra))}, which the checks read; assign it separately"
                )
            if len(bound) == 1 and isinstance(targets[0], ast.Name) and item.value is not None:
                name = targets[0].id
                reads = _read_paths([t for t in child_trees if t is not item], name) or {()}
                value = _literal(item.value)
                pruned = value if value is _NOT_LITERAL else _prune(value, reads)
                if pruned is not _NOT_LITERAL and _round_trips(pruned):  # the child holds only what it reads
                    result.append(("exec", ast.unparse(item) if pruned is value else f"{name} = {pruned!r}"))
                    continue
                leaked = [
                    p
                    for p in _read_paths(judge_trees, name)  # a judge read the child's reads do not cover
                    if not any(len(c) <= len(p) and all(k in (None, q) for k, q in zip(c, p)) for c in reads)
                ]
                if leaked:
                    text = [
                        name + "".join("[...]" if k is None else f"[{k!r}]" for k in p)
                        for p in (sorted(reads, key=repr)[0], leaked[0])
                    ]
                    raise UnsupportedTest(
                        f"'{_first_line(item)}' is needed by the solution's side, where it is read "
                        f"as {text[0]} while the checks read {text[1]}; keep inputs and expected "
                        "values apart"
                    )
        result.append(("exec", ast.unparse(item)))
    return result


def _literal(node):  # a literal's value, or _NOT_LITERAL
    try:
        return ast.literal_eval(node)
    except _EVAL_ERRORS:
        return _NOT_LITERAL


def _round_trips(value) -> bool:
    try:
        return _literal(repr(value)) == value
    except ValueError:  # an int too long for repr
        return False


def _first_line(stmt: ast.stmt) -> str:
    return ast.unparse(stmt).splitlines()[0][:80]


PROGRAMS = Path(__file__).with_name("programs")
PROBE_PROGRAM = (PROGRAMS / "probe.py").read_text(encoding="utf-8")
JUDGE_PROGRAM = (PROGRAMS / "judge.py").read_text(encoding="utf-8")


def child_stdin(solution: str, split: SplitTest) -> str:
    """What ``PROBE_PROGRAM`` reads: the solution and its probes (no expected value among them)."""
    return (
        json.dumps(
            {
                "solution": solution,
                "ops": split.child_ops,
                "modules": sorted(split.modules),
                "required": sorted(split.required),
                "mark": MARK,
            }
        )
        + "\n"
    )


def probe_values(stdout: str) -> str | None:
    """The probe results a child printed (a JSON list ``[{"v": ...} | {"e": ...}]``, as its text), or
    None if it printed none or nothing readable. Numbers stay text here (``parse_int=str``): a long
    integer is the judge's to compare, not an error of this process's int() limit."""
    if MARK not in stdout:
        return None
    line = stdout.rsplit(MARK, 1)[1].split("\n", 1)[0]
    try:  # the program wrote this: any text (deep nesting, huge numbers) is its failure, never ours
        values = json.loads(line, parse_int=str)
    except (ValueError, RecursionError):
        return None
    return line if isinstance(values, list) else None


def judge_stdin(splits: list[SplitTest], secret: str, values: list[str | None]) -> str:
    """What ``JUDGE_PROGRAM`` reads: every case's checks, the secret line, then the probe values."""
    cases = [(s.judge_ops, sorted(s.modules), s.setup) for s in splits]
    raw = "[" + ",".join("null" if v is None else v for v in values) + "]"
    return json.dumps({"cases": cases, "name": _V}) + "\n" + secret + "\n" + raw + "\n"


def judge_verdicts(stdout: str, secret: str, n: int) -> list[tuple[bool, str]]:
    """(passed, reason) per case from the judge's output; a case passes only with the secret."""
    out: list[tuple[bool, str]] = [(False, "no verdict from the judge")] * n
    for line in stdout.split("\n"):  # the judge's own lines; a value's text is never a line of its own
        head, _, rest = line.partition(":")
        if head == secret:
            case, _, word = rest.partition(":")
            if _case_number(case, n) is not None and word == "pass":
                out[int(case)] = (True, "assert passed")
        elif _case_number(head, n) is not None and rest.startswith("fail:"):
            out[int(head)] = (False, rest[len("fail:") :].strip())
    return out


def _case_number(text: str, n: int) -> int | None:
    """``text`` as a case number below ``n``: ASCII digits only, and short (``'²'.isdigit()`` is true)."""
    if not (0 < len(text) <= 9 and text.isascii() and text.isdigit()):
        return None
    return int(text) if int(text) < n else None
