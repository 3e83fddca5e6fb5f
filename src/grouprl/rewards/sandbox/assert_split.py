"""Splitting an assert test into what runs with the solution (probes) and what must not (checks).

``split_test`` is step 1 of the harness (``code_harness.py``'s docstring tells the whole of it):
``assert sorted(f(x)) == [1, 2]`` becomes the probe ``f(x)``, run by the solution's sandbox, and the
check ``sorted(V0) == [1, 2]``, run by the judge's on the probe's value. It holds the split's result
(``SplitTest``), the error for a test that cannot be split safely (``UnsupportedTest``), the names a
solution binds (``solution_bindings``) and the test helpers the solution's side may see, cut down
(``_child_data``, with ``harness_literals``).
"""

from __future__ import annotations

import ast
import builtins
import sys
from dataclasses import dataclass, field

from grouprl.rewards.sandbox.harness_literals import NOT_LITERAL, literal, prune, read_paths, round_trips

VALUES_NAME = "__grouprl_v"  # the list of probe values, as the checks name it
_BUILTINS = set(dir(builtins))
_STDLIB = set(getattr(sys, "stdlib_module_names", ()))
_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


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
        return ast.Subscript(value=ast.Name(id=VALUES_NAME, ctx=ast.Load()), slice=ast.Constant(index), ctx=ast.Load())

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
    ``solution`` defines are its own (see ``code_harness``'s docstring)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise UnsupportedTest(f"test does not parse: {err.msg} (line {err.lineno})") from None
    body = [part for stmt in tree.body for part in _split_unpacking(stmt)]
    out, tainted = _outside_names(body, solution)
    placed = _place(body, tainted)
    # Helper statements the probes depend on run on both sides (they hold no solution values).
    needed = set().union(*(_loaded(s) for kind, s in placed if kind == "child")) if placed else set()
    child_side = _probes_and_checks(placed, tainted, needed, out.judge_ops)
    out.child_ops = _child_data(_kept_helpers(child_side, needed), needed, out.judge_ops)
    return out


def _outside_names(body: list[ast.stmt], solution: str) -> tuple[SplitTest, set[str]]:
    """The split to fill (the stdlib modules, imports and builtins the test names without defining) and
    the names that are the solution's (*tainted*): what it defines, or what nothing else could be."""
    defined = set().union(*(_bound_names(s) for s in body)) if body else set()
    free = set().union(*(_loaded(s) for s in body)) if body else set()
    own, imports = solution_bindings(solution)
    outside = free - defined
    tainted = {n for n in outside if n in own or (n not in _BUILTINS and n not in _STDLIB and n not in imports)}
    out = SplitTest(
        modules={n for n in outside - tainted if n in _STDLIB and n not in imports},
        setup=[imports[n] for n in sorted(outside & set(imports))],
        required=tainted & _BUILTINS,
    )
    return out, tainted


def _place(body: list[ast.stmt], tainted: set[str]) -> list[tuple[str, ast.stmt]]:
    """Statements, in order: ("assert", stmt); ("child", stmt) needs the solution; ("judge", stmt) does
    not. ``tainted`` grows by what a child statement binds (it holds the solution's values)."""
    placed: list[tuple[str, ast.stmt]] = []
    for stmt in body:
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
    return placed


def _probes_and_checks(
    placed: list[tuple[str, ast.stmt]], tainted: set[str], needed: set[str], judge_ops: list
) -> list[tuple[str, str | ast.stmt]]:
    """Each assert cut into probes (the child's evals) and a check on their values (appended to
    ``judge_ops``, as are the judge's statements); returns the child's side in order, helpers as
    statements still to resolve. ``needed`` grows by what the probes read."""
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
            judge_ops.append(("assert", ast.unparse(check), used))
        elif kind == "child":
            child_side.append(("exec", ast.unparse(stmt)))
        else:
            judge_ops.append(("exec", ast.unparse(stmt), []))
            child_side.append(("helper", stmt))  # resolved by _kept_helpers once all needs are known
    return child_side


def _kept_helpers(child_side: list[tuple[str, str | ast.stmt]], needed: set[str]) -> list[tuple]:
    """The child's side with only the helpers it needs (in order); ``needed`` grows by what they read."""
    kept: list[tuple[str, str | ast.stmt]] = []
    for kind, item in reversed(child_side):  # backwards, so a helper's own needs are seen in time
        if isinstance(item, str):  # an eval or exec source; helpers are statements
            kept.append((kind, item))
        elif _bound_names(item) & needed or not _bound_names(item) and _loaded(item) & needed:  # or xs.sort()
            if any(isinstance(n, ast.Assert) for n in ast.walk(item)):
                raise UnsupportedTest(f"'{_first_line(item)}' is needed by the solution's side but asserts")
            needed |= _loaded(item)
            kept.append(("helper", item))
    return kept[::-1]


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
            extra = {n for n in bound - needed if read_paths(judge_trees, n)}
            if extra:
                raise UnsupportedTest(
                    f"'{_first_line(item)}' is needed by the solution's side and also binds "
                    f"{', '.join(sorted(extra))}, which the checks read; assign it separately"
                )
            if len(bound) == 1 and isinstance(targets[0], ast.Name) and item.value is not None:
                name = targets[0].id
                reads = read_paths([t for t in child_trees if t is not item], name) or {()}
                value = literal(item.value)
                pruned = value if value is NOT_LITERAL else prune(value, reads)
                if pruned is not NOT_LITERAL and round_trips(pruned):  # the child holds only what it reads
                    result.append(("exec", ast.unparse(item) if pruned is value else f"{name} = {pruned!r}"))
                    continue
                leaked = [
                    p
                    for p in read_paths(judge_trees, name)  # a judge read the child's reads do not cover
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


def _first_line(stmt: ast.stmt) -> str:
    return ast.unparse(stmt).splitlines()[0][:80]
