"""Sandbox throughput: run N small Python samples through grouprl.rewards.sandbox.runner.

    python -m bench.rollouts.sandbox [--n 200] [--workers 4]

Prints samples/s for workers=1 and for --workers, plus the backend used.
"""

from __future__ import annotations

import argparse
import time

from grouprl.rewards.sandbox.runner import run_many

TEMPLATES = [
    "n = {i}\nassert sum(range(n + 1)) == n * (n + 1) // 2\nprint(n)",
    "import math\nx = {i}\nassert math.isqrt(x * x) == x\nprint(x * x)",
    "s = sorted([({i} * 7919) % 101 for _ in range(3)] + [{i}])\nassert s == sorted(s)\nprint(len(s))",
    "def fib(k):\n    a, b = 0, 1\n    for _ in range(k):\n        a, b = b, a + b\n    return a\nassert fib(10) == 55\nprint(fib({i} % 50))",
    "import sys\nwords = sys.stdin.read().split()\nassert len(words) == 3\nprint({i})",
]


def samples(n: int) -> list[str]:
    return [TEMPLATES[i % len(TEMPLATES)].format(i=i) for i in range(n)]


def bench(codes: list[str], workers: int) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    rs = run_many(codes, workers=workers, stdin="a b c", timeout_s=10)
    dt = time.perf_counter() - t0
    bad = [r for r in rs if not r.ok]
    return len(codes) / dt, len(bad), rs[0].backend


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    codes = samples(args.n)
    run_many(codes[:4], workers=2)  # warm-up (bwrap probe, page cache)
    for w in sorted({1, args.workers}):
        rate, n_bad, backend = bench(codes, w)
        print(f"backend={backend} workers={w} samples={len(codes)} failed={n_bad} -> {rate:.1f} samples/s")
        if n_bad:
            raise SystemExit(f"{n_bad} samples failed")


if __name__ == "__main__":
    main()
