"""The solution's side of an assert test (see ``code_harness.py``), run in the sandbox.

stdin: one JSON line ``{"solution", "ops", "modules", "required", "mark"}``. The solution runs,
then only the probes (the sub-expressions of the asserts that need it); their values are printed
after ``mark`` as plain data. Standard-library values (Counter, defaultdict, namedtuple, deque,
range, a generator or iterator, Decimal, Fraction, dates...) cross as tagged data the judge rebuilds
as the same type; anything else of the solution's own (an object that equals everything) cannot
cross. This process holds no expected value: the checks run in the judge.
"""

import collections
import datetime
import decimal
import fractions
import json
import sys
import types

MAX_ITEMS = 100_000  # items taken from one iterator (an endless generator is the program's failure)
_FACTORIES = {
    int: "int",
    float: "float",
    list: "list",
    set: "set",
    dict: "dict",
    str: "str",
    tuple: "tuple",
    frozenset: "frozenset",
    bool: "bool",
    complex: "complex",
    bytes: "bytes",
    None: None,
}
_VIEWS = {type({}.keys()): "K", type({}.values()): "V", type({}.items()): "W"}
_DATES = (datetime.datetime, datetime.date, datetime.time)


def _is_iterator(x) -> bool:
    t = type(x)
    return isinstance(x, types.GeneratorType) or (
        t.__module__ in ("builtins", "itertools") and hasattr(t, "__next__") and iter(x) is x
    )


def _pairs(mapping, depth):
    return [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in mapping.items()]


def encode(x, depth=0):
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
        return {{list: "l", tuple: "t", set: "s", frozenset: "z"}[t]: [encode(v, depth + 1) for v in x]}
    if t is dict:
        return {"d": _pairs(x, depth)}
    if t is collections.Counter:
        return {"C": _pairs(x, depth)}
    if t is collections.OrderedDict:
        return {"O": _pairs(x, depth)}
    if t is collections.defaultdict:
        if x.default_factory not in _FACTORIES:
            raise TypeError("returned a defaultdict whose default is not a builtin type")
        return {"D": [_FACTORIES[x.default_factory], _pairs(x, depth)]}
    if t is collections.deque:
        return {"Q": [x.maxlen, [encode(v, depth + 1) for v in x]]}
    if isinstance(x, tuple) and t.__bases__ == (tuple,) and isinstance(getattr(t, "_fields", None), tuple):
        return {"N": [t.__name__, list(t._fields), [encode(v, depth + 1) for v in tuple.__iter__(x)]]}
    if t is range:
        return {"R": [x.start, x.stop, x.step]}
    if t in _VIEWS:
        if t is type({}.items()):
            return {"W": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in x]}
        return {_VIEWS[t]: [encode(v, depth + 1) for v in x]}
    if t is decimal.Decimal:
        return {"M": str(x)}
    if t is fractions.Fraction:
        return {"F": [x.numerator, x.denominator]}
    if t in _DATES or t is datetime.timedelta:
        return {"T": [t.__name__, x.isoformat() if t in _DATES else [x.days, x.seconds, x.microseconds]]}
    if _is_iterator(x):
        items = []
        for v in x:
            if len(items) >= MAX_ITEMS:
                raise ValueError(f"returned an iterator of more than {MAX_ITEMS} items")
            items.append(encode(v, depth + 1))
        return {"I": items}
    raise TypeError(
        f"returned a {t.__name__} object; only plain values (None, bool, int, float, str, bytes, "
        "list, tuple, dict, set) and standard-library values (Counter, defaultdict, namedtuple, "
        "deque, range, iterators, Decimal, Fraction, dates) are compared"
    )


def main():
    params = json.loads(sys.stdin.readline())
    sys.set_int_max_str_digits(0)  # a long integer is a value to compare, not an error
    g = {"__name__": "__main__", "__builtins__": __builtins__}
    for m in params["modules"]:
        g[m] = __import__(m)
    exec(compile(params["solution"], "solution.py", "exec"), g)
    out = []
    missing = [n for n in params["required"] if n not in g]
    try:
        if missing:  # a name the test calls that the solution was to define (max, sorted...): not the builtin
            raise NameError(f"the solution does not define {missing[0]!r}")
        for kind, src in params["ops"]:
            if kind == "exec":
                exec(compile(src, "test.py", "exec"), g)
            else:
                try:
                    out.append({"v": encode(eval(compile(src, "test.py", "eval"), g))})
                except Exception as err:
                    out.append({"e": type(err).__name__ + ": " + str(err)[:200]})
    except Exception as err:
        out.append({"e": "test setup: " + type(err).__name__ + ": " + str(err)[:200]})
    print("\n" + params["mark"] + json.dumps(out))


if __name__ == "__main__":
    main()
