"""Write the acronym example dataset: a phrase in, its acronym out (train.jsonl / test.jsonl)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

WORDS = ["portable", "network", "graphics", "central", "processing", "unit", "random", "access", "memory",
         "graphical", "user", "interface", "light", "emitting", "diode", "solid", "state", "drive", "open",
         "source", "machine", "learning", "natural", "language", "deep", "neural", "model", "data", "base"]


def rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        phrase = rng.sample(WORDS, rng.randint(2, 4))
        out.append({"phrase": " ".join(phrase), "acronym": "".join(w[0] for w in phrase).upper(),
                    "words": len(phrase)})
    return out


def write(out_dir: str | Path, n_train: int = 256, n_test: int = 32) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, data in (("train", rows(n_train, 0)), ("test", rows(n_test, 1))):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
    return out


if __name__ == "__main__":
    print(write(sys.argv[1] if len(sys.argv) > 1 else "data/acronyms"))
