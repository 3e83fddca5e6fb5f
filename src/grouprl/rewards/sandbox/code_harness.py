"""A test harness for assert-style code tests that the tested program cannot short-circuit.

Appending ``assert f(2) == 4`` to the program and counting "exit 0" as a pass rewards a program
that calls ``os._exit(0)``, reads its own file, returns an always-equal object or patches ``print``.
Whatever runs in the program's process is the program's, so the verdict is made elsewhere:

1. Each test is split (``split_test``) into what must run with the solution and what must not.
   ``assert sorted(f(x)) == [1, 2]`` becomes the *probe* ``f(x)`` (a value computed by the
   solution's code) and the *check* ``sorted(V0) == [1, 2]``. Names the test does not define,
   that are not builtins and not standard-library modules, are the solution's. Test helpers the
   probes need cross cut down to what the probes read (``_child_data``).
2. The solution runs in one sandbox with only the probes (``child_program``): it prints the
   probes' values as plain data (None, bool, int, float, str, bytes, list, tuple, dict, set;
   exact types, so no object of its own can cross) after a marker. The expected values are in
   no file and no input it can see; an early exit leaves no values, which fails the case.
3. A second sandbox runs only the checks on the decoded values (``judge_program``), with no
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
    child_ops: list[tuple[str, str]] = field(default_factory=list)   # ("exec"|"eval", source)
    judge_ops: list[tuple[str, str, list[int]]] = field(default_factory=list)  # (kind, source, values used)
    modules: set[str] = field(default_factory=set)  # stdlib modules the test names without importing


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
        self.tainted, self.sources, self.first = tainted, [], first_index
        self.scope_bound: list[set[str]] = []

    def _needs_solution(self, node: ast.AST) -> bool:
        return bool(_loaded(node) & self.tainted)

    def _probe(self, node: ast.expr) -> ast.expr:
        bound = set().union(*self.scope_bound) if self.scope_bound else set()
        if _loaded(node) & bound:
            raise UnsupportedTest(f"'{ast.unparse(node)}' calls the solution with a lambda/comprehension "
                                  "variable; write one assert per value")
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


def split_test(source: str) -> SplitTest:
    """Split one test (``assert ...`` lines and helper statements) into probes and checks."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise UnsupportedTest(f"test does not parse: {err.msg} (line {err.lineno})") from None
    tree.body = [part for stmt in tree.body for part in _split_unpacking(stmt)]
    defined = set().union(*(_bound_names(s) for s in tree.body)) if tree.body else set()
    free = set().union(*(_loaded(s) for s in tree.body)) if tree.body else set()
    tainted = {n for n in free - defined if n not in _BUILTINS and n not in _STDLIB}
    out = SplitTest(modules={n for n in free - defined if n in _STDLIB})
    # Statements, in order: ("child", stmt) needs the solution; ("judge", stmt) does not.
    placed: list[tuple[str, ast.stmt]] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assert):
            placed.append(("assert", stmt))
        elif _loaded(stmt) & tainted:
            if any(isinstance(n, ast.Assert) for n in ast.walk(stmt)):
                raise UnsupportedTest(f"'{_first_line(stmt)}' asserts inside code that runs with the solution "
                                      "(e.g. check(candidate)); write the asserts at the top level")
            tainted |= _bound_names(stmt)
            placed.append(("child", stmt))
        else:
            placed.append(("judge", stmt))
    # Helper statements the probes depend on run on both sides (they hold no solution values).
    needed = set().union(*(_loaded(s) for kind, s in placed if kind == "child")) if placed else set()
    probes_count = 0
    child_side: list[tuple[str, str]] = []
    for kind, stmt in placed:
        if kind == "assert":
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
    kept: list[tuple[str, str]] = []
    for kind, item in reversed(child_side):  # backwards, so a helper's own needs are seen in time
        if kind != "helper":
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
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], (ast.Tuple, ast.List)) and isinstance(stmt.value, (ast.Tuple, ast.List))):
        return [stmt]
    names, values = stmt.targets[0].elts, stmt.value.elts
    if (len(names) != len(values) or not all(isinstance(n, ast.Name) for n in names)
            or any(isinstance(v, ast.Starred) for v in values)
            or {n.id for n in names} & set().union(*(_loaded(v) for v in values))):
        return [stmt]
    return [ast.Assign(targets=[ast.Name(id=n.id, ctx=ast.Store())], value=v, lineno=stmt.lineno)
            for n, v in zip(names, values)]


def _read_paths(trees: list[ast.AST], name: str) -> set[tuple]:
    """The subscript paths by which ``trees`` read ``name``: ``CASE["inp"]`` is ``("inp",)``, a read
    of the whole value is ``()``, a computed index is ``None`` (``CASES[i][0]``: ``(None, 0)``)."""
    paths: set[tuple] = set()
    for tree in trees:
        parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                path, cur = [], node
                while isinstance(parent.get(cur), ast.Subscript) and parent[cur].value is cur:
                    cur = parent[cur]
                    key = _literal(cur.slice)
                    path.append(key if isinstance(key, (int, str, bytes, float)) else None)
                paths.add(tuple(path))
    return paths


def _prune(value, paths: set[tuple]):
    """``value`` with only what ``paths`` read (other dict keys dropped, other items None), or
    ``_NOT_LITERAL`` where it cannot be cut down so (a string read by index, say)."""
    if () in paths:
        return value
    if isinstance(value, dict):
        parts = {k: _prune(v, {p[1:] for p in paths if p[0] is None or p[0] == k}) for k, v in value.items()
                 if any(p[0] is None or p[0] == k for p in paths)}
        out, items = parts, parts.values()
    elif isinstance(value, (list, tuple)) and all(p[0] is None or type(p[0]) is int for p in paths):
        kept = [{p[1:] for p in paths if p[0] is None or p[0] in (i, i - len(value))} for i in range(len(value))]
        out = items = type(value)(_prune(v, k) if k else None for v, k in zip(value, kept))
    else:
        return _NOT_LITERAL
    return _NOT_LITERAL if any(x is _NOT_LITERAL for x in items) else out


def _child_data(ops: list[tuple], needed: set[str], judge_ops: list) -> list[tuple[str, str]]:
    """The child's ops with each helper cut down to what the solution's side reads (see above)."""
    child_trees = [item if kind == "helper" else ast.parse(item, mode="eval" if kind == "eval" else "exec")
                   for kind, item in ops]
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
                raise UnsupportedTest(f"'{_first_line(item)}' is needed by the solution's side and also binds "
                                      f"{', '.join(sorted(extra))}, which the checks read; assign it separately")
            if len(bound) == 1 and isinstance(targets[0], ast.Name) and item.value is not None:
                name = targets[0].id
                reads = _read_paths([t for t in child_trees if t is not item], name) or {()}
                value = _literal(item.value)
                pruned = value if value is _NOT_LITERAL else _prune(value, reads)
                if pruned is not _NOT_LITERAL and _round_trips(pruned):  # the child holds only what it reads
                    result.append(("exec", ast.unparse(item) if pruned is value else f"{name} = {pruned!r}"))
                    continue
                leaked = [p for p in _read_paths(judge_trees, name)  # a judge read the child's reads do not cover
                          if not any(len(c) <= len(p) and all(k in (None, q) for k, q in zip(c, p)) for c in reads)]
                if leaked:
                    text = [name + "".join("[...]" if k is None else f"[{k!r}]" for k in p)
                            for p in (sorted(reads, key=repr)[0], leaked[0])]
                    raise UnsupportedTest(f"'{_first_line(item)}' is needed by the solution's side, where it is read "
                                          f"as {text[0]} while the checks read {text[1]}; keep inputs and expected "
                                          "values apart")
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


_CHILD = '''
import json as _gr_json
{encoder}
_gr_g = {{"__name__": "__main__", "__builtins__": __builtins__}}
for _gr_m in {modules!r}:
    _gr_g[_gr_m] = __import__(_gr_m)
exec(compile({solution!r}, "solution.py", "exec"), _gr_g)
_gr_out = []
try:
    for _gr_kind, _gr_src in {ops!r}:
        if _gr_kind == "exec":
            exec(compile(_gr_src, "test.py", "exec"), _gr_g)
        else:
            try:
                _gr_out.append({{"v": _gr_enc(eval(compile(_gr_src, "test.py", "eval"), _gr_g))}})
            except Exception as _gr_err:
                _gr_out.append({{"e": type(_gr_err).__name__ + ": " + str(_gr_err)[:200]}})
except Exception as _gr_err:
    _gr_out.append({{"e": "test setup: " + type(_gr_err).__name__ + ": " + str(_gr_err)[:200]}})
print("\\n" + {mark!r} + _gr_json.dumps(_gr_out))
'''

_ENCODER = '''
def _gr_enc(x, depth=0):
    t = type(x)
    if depth > 64:
        raise ValueError("value nested too deeply")
    if x is None or t is bool or t is str or t is int:
        return x
    if t is float:
        return {"f": repr(x)}
    if t is bytes:
        return {"b": x.hex()}
    if t is complex:
        return {"c": [repr(x.real), repr(x.imag)]}
    if t in (list, tuple, set, frozenset):
        return {{list: "l", tuple: "t", set: "s", frozenset: "z"}[t]: [_gr_enc(v, depth + 1) for v in x]}
    if t is dict:
        return {"d": [[_gr_enc(k, depth + 1), _gr_enc(v, depth + 1)] for k, v in x.items()]}
    raise TypeError(f"returned a {t.__name__} object; only plain values (None, bool, int, float, str, "
                    "bytes, list, tuple, dict, set) are compared")
'''


def child_program(solution: str, split: SplitTest) -> str:
    """The program run with the solution: its probes' values, encoded, after ``MARK``."""
    return _CHILD.format(encoder=_ENCODER, modules=sorted(split.modules), solution=solution,
                         ops=split.child_ops, mark=MARK)


def probe_values(stdout: str) -> list | None:
    """The probe results a child printed (``[{"v": ...} | {"e": ...}]``), or None if it printed none."""
    if MARK not in stdout:
        return None
    line = stdout.rsplit(MARK, 1)[1].split("\n", 1)[0]
    try:  # the program wrote this: any text (deep nesting, huge numbers) is its failure, never ours
        values = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return values if isinstance(values, list) else None


_JUDGE = '''
import json, sys
_secret = sys.stdin.readline().strip()
_all_values = json.loads(sys.stdin.readline())

def _dec(x):
    if x is None or type(x) in (bool, int, str):
        return x
    if type(x) is dict and len(x) == 1:
        (tag, v), = x.items()
        if tag == "f": return float(v)
        if tag == "b": return bytes.fromhex(v)
        if tag == "c": return complex(float(v[0]), float(v[1]))
        if tag in ("l", "t", "s", "z"):
            items = [_dec(i) for i in v]
            return {{"l": list, "t": tuple, "s": set, "z": frozenset}}[tag](items)
        if tag == "d": return {{_dec(k): _dec(w) for k, w in v}}
    raise ValueError("not a plain value")

for _case, (_ops, _modules) in enumerate({cases!r}):
    _g = {{m: __import__(m) for m in _modules}}
    _values = _all_values[_case]
    try:
        if _values is None:
            raise AssertionError("the program exited before its tests ran (no values: early exit?)")
        _v = []
        for _item in _values:
            _v.append(("e", _item["e"]) if "e" in _item else ("v", _dec(_item["v"])))
        _g[{name!r}] = [val for _, val in _v]
        for _kind, _src, _used in _ops:
            for _i in _used:
                if _i >= len(_v):
                    raise AssertionError("the program stopped before this value was computed")
                if _v[_i][0] == "e":
                    raise AssertionError(_v[_i][1])
            if _kind == "exec":
                exec(_src, _g)
            elif not eval(_src, _g):
                raise AssertionError("assert failed: " + _src[:160])
    except Exception as _err:
        print(f"{{_case}}:fail:{{type(_err).__name__}}: {{str(_err)[:200]}}".replace("\\n", " "))
        continue
    print(f"{{_secret}}:{{_case}}:pass")
'''


def judge_program(splits: list[SplitTest]) -> str:
    """The program that checks every case's values (stdin: the secret line, then the values)."""
    cases = [(s.judge_ops, sorted(s.modules)) for s in splits]
    return _JUDGE.format(cases=cases, name=_V)


def judge_stdin(secret: str, values: list[list | None]) -> str:
    return secret + "\n" + json.dumps(values) + "\n"


def judge_verdicts(stdout: str, secret: str, n: int) -> list[tuple[bool, str]]:
    """(passed, reason) per case from the judge's output; a case passes only with the secret."""
    out: list[tuple[bool, str]] = [(False, "no verdict from the judge")] * n
    for line in stdout.splitlines():
        head, _, rest = line.partition(":")
        if head == secret:
            case, _, word = rest.partition(":")
            if case.isdigit() and int(case) < n and word == "pass":
                out[int(case)] = (True, "assert passed")
        elif head.isdigit() and int(head) < n and rest.startswith("fail:"):
            out[int(head)] = (False, rest[len("fail:"):].strip())
    return out
