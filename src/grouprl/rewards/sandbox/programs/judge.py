"""The checks of assert tests (see ``code_harness.py``), run in a sandbox with no solution code.

stdin: a JSON line ``{"cases": [[ops, modules, setup], ...], "name": ...}``, then the per-run
secret, then every case's probe values (``[{"v": ...} | {"e": ...}]`` or null). The values are
the solution's output, so they are decoded strictly (exact tags, fresh standard-library objects);
a case passes only when its last assert held, and only a line carrying the secret says so.
"""

import collections
import datetime
import decimal
import fractions
import json
import sys

_FACTORIES = {
    "int": int,
    "float": float,
    "list": list,
    "set": set,
    "dict": dict,
    "str": str,
    "tuple": tuple,
    "frozenset": frozenset,
    "bool": bool,
    "complex": complex,
    "bytes": bytes,
    None: None,
}
_SEQUENCES = {"l": list, "t": tuple, "s": set, "z": frozenset}
_DATES = {"datetime": datetime.datetime, "date": datetime.date, "time": datetime.time}


def _pairs(v):
    return [(decode(k), decode(w)) for k, w in v]


def decode(x):
    if x is None or type(x) in (bool, int, str):
        return x
    if type(x) is dict and len(x) == 1:
        ((tag, v),) = x.items()
        if tag == "f":
            return float(v)
        if tag == "b":
            return bytes.fromhex(v)
        if tag == "c":
            return complex(float(v[0]), float(v[1]))
        if tag in _SEQUENCES:
            return _SEQUENCES[tag](decode(i) for i in v)
        if tag == "d":
            return dict(_pairs(v))
        if tag == "C":
            return collections.Counter(dict(_pairs(v)))
        if tag == "O":
            return collections.OrderedDict(_pairs(v))
        if tag == "D":
            return collections.defaultdict(_FACTORIES[v[0]], _pairs(v[1]))
        if tag == "Q":
            return collections.deque((decode(i) for i in v[1]), v[0])
        if tag == "N":
            typename, fields, items = v
            return collections.namedtuple(str(typename), [str(f) for f in fields])(*(decode(i) for i in items))
        if tag == "R":
            return range(int(v[0]), int(v[1]), int(v[2]))
        if tag == "K":
            return dict.fromkeys(decode(i) for i in v).keys()
        if tag == "V":
            return dict(enumerate(decode(i) for i in v)).values()
        if tag == "W":
            return dict((decode(k), decode(w)) for k, w in v).items()
        if tag == "M":
            return decimal.Decimal(str(v))
        if tag == "F":
            return fractions.Fraction(int(v[0]), int(v[1]))
        if tag == "T":
            kind, value = v
            if kind == "timedelta":
                return datetime.timedelta(days=value[0], seconds=value[1], microseconds=value[2])
            return _DATES[kind].fromisoformat(value)
        if tag == "I":
            return iter([decode(i) for i in v])
    raise ValueError("not a plain value")


def main():
    sys.set_int_max_str_digits(0)
    params = json.loads(sys.stdin.readline())
    secret = sys.stdin.readline().strip()
    all_values = json.loads(sys.stdin.readline())
    for case, (ops, modules, setup) in enumerate(params["cases"]):
        g = {m: __import__(m) for m in modules}
        values = all_values[case]
        try:
            if values is None:
                raise AssertionError("the program exited before its tests ran (no values: early exit?)")
            for src in setup:  # the solution's standard-library imports the checks name (Counter...)
                exec(src, g)
            v = [("e", item["e"]) if "e" in item else ("v", decode(item["v"])) for item in values]
            g[params["name"]] = [val for _, val in v]
            for kind, src, used in ops:
                for i in used:
                    if i >= len(v):
                        raise AssertionError("the program stopped before this value was computed")
                    if v[i][0] == "e":
                        raise AssertionError(v[i][1])
                if kind == "exec":
                    exec(src, g)
                elif not eval(src, g):
                    raise AssertionError("assert failed: " + src[:160])
        except Exception as err:
            print(f"{case}:fail:{type(err).__name__}: {str(err)[:200]}".replace("\n", " "))
            continue
        print(f"{secret}:{case}:pass")


if __name__ == "__main__":
    main()
