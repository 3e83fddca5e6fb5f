"""Which ``src/grouprl`` modules a training step runs: measured, not counted by hand (docs/architecture.md).

Runs ``grouprl train`` on the tiny model with a short schedule under a profiler hook and lists every module
of the package whose code ran (a) inside one ``Trainer.train_step`` (the second: the first also builds
caches) and (b) in the whole command. Prints both lists and their sizes; ``--out`` writes them as JSON.

    python experiments/step_files.py --out experiments/results/step_files.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import grouprl

PACKAGE = str(Path(grouprl.__file__).parent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--output_dir", default="/tmp/grouprl-step-files")
    args = parser.parse_args()

    from grouprl import cli
    from grouprl.train.trainer import Trainer

    whole: set[str] = set()
    step: set[str] = set()
    seen = {"steps": 0}

    def tracer(frame, event, arg):
        if event == "call":
            name = frame.f_code.co_filename
            if name.startswith(PACKAGE):
                whole.add(name)
                if seen["steps"] == 2:
                    step.add(name)

    original = Trainer.train_step

    def counted(self):
        seen["steps"] += 1
        try:
            return original(self)
        finally:
            if seen["steps"] == 2:
                seen["steps"] = 3  # only the second step is recorded

    Trainer.train_step = counted  # type: ignore[method-assign]
    sys.setprofile(tracer)
    import threading

    threading.setprofile(tracer)
    try:
        cli.main(["train", "--model", "tiny", "--sft_steps", "10", "--max_steps", "3", "--n_eval", "4",
                  "--n_train", "40", "--device", "cpu", "--output_dir", args.output_dir, "--overwrite_output_dir",
                  "true", "--logging_steps", "1"])
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]

    def rel(paths: set[str]) -> list[str]:
        return sorted(str(Path(p).relative_to(PACKAGE)) for p in paths)

    result = {"one_train_step": rel(step), "grouprl_train": rel(whole)}
    print(f"modules run by one train_step: {len(result['one_train_step'])}")
    print("  " + "\n  ".join(result["one_train_step"]))
    print(f"modules run by the whole `grouprl train`: {len(result['grouprl_train'])}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
