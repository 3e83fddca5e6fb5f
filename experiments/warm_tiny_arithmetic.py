"""A warm tiny arithmetic model for the worked runs of docs/rewards.md: the test suite's warm start
(tests/conftest.py warm_arithmetic_dir: hidden 32, 1 layer, SFT at lr 1e-2, batch 32) run longer.

    python experiments/warm_tiny_arithmetic.py --out runs/warm_tiny --steps 450
"""

from __future__ import annotations

import argparse
import time

from grouprl.job.sft import sft_warm_start
from grouprl.models.tiny import init_tiny
from grouprl.run_config import build_config
from grouprl.tasks import load_task


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=450)
    args = parser.parse_args()
    start = time.time()
    task = load_task(build_config(None, {"n_train": 2000, "n_eval": 8}, environ={}))
    tiny = init_tiny(task.tokenizer_corpus(), f"{args.out}_untrained", 32, 1, 4, seed=0)
    out = sft_warm_start(str(tiny), task.train_rows, task.messages, args.out, max_steps=args.steps,
                         learning_rate=1e-2, batch_size=32, seed=0)
    print(f"warm model {out} in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
