"""Dynamic sampling with two real processes (torchrun, gloo): every process generates and scores its
share of each round, the kept groups are chosen from the gathered round (the same on both), cut to a
multiple of the process count and shared out by whole groups; a resumed run generates the same rounds.
(The hand-made rounds of ``test_dynamic_sampling.py`` check the choice itself on one process.)"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from launch import torchrun

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


def rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_two_processes_train_on_whole_disagreeing_groups_and_resume_the_same_rounds(warm_arithmetic_dir, tmp_path):
    run, resumed = tmp_path / "run", tmp_path / "resumed"
    args = [
        "-m",
        "grouprl.cli",
        "train",
        "--model_name_or_path",
        str(warm_arithmetic_dir),
        "--n_train",
        "200",
        "--n_eval",
        "0",
        "--batch_size",
        "4",
        "--num_generations",
        "4",
        "--max_new_tokens",
        "6",
        "--logging_steps",
        "1",
        "--device",
        "cpu",
        "--max_steps",
        "3",
        "--save_steps",
        "2",
        "--dynamic_sampling",
        "{metric: score, max_batches: 3}",
        "--temperature",
        "1.2",
    ]
    torchrun(args + ["--output_dir", str(run)], nproc=2, timeout=400, cwd=tmp_path)
    metrics = rows(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3]  # logged once, by process 0
    by_step: dict[int, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows(run / "rollouts" / "rollouts.jsonl"):
        by_step[r["step"]][r["group"]].append(r)
    trained = 0
    for m in metrics:
        kept = m["dynamic_sampling/groups_kept"]
        assert kept % 2 == 0 and kept <= 4  # whole groups, the same number on each of the two processes
        assert (
            m["dynamic_sampling/groups_kept"] + m["dynamic_sampling/groups_dropped"]
            == 4 * m["dynamic_sampling/batches"]
        )  # every generated group of every round is accounted for
        groups = by_step[m["step"]]
        if kept:
            trained += 1
            # both processes' shares, each group under the id it was born with (unique across the step's rounds:
            # round r's groups are r * batch_size + 0..batch_size-1), never renumbered
            assert len(groups) == int(kept) and all(0 <= g < 4 * m["dynamic_sampling/batches"] for g in groups)
            for members in groups.values():
                assert len(members) == 4 and len({r["reward"] for r in members}) > 1  # whole, and they disagree
    assert trained >= 2, "the warm model should give groups with score variance in most steps"

    # Resumed from step 2 (both processes' RNG streams, the sampler's position): step 3 draws the same
    # rounds, keeps the same groups and trains on the same samples.
    torchrun(
        args + ["--output_dir", str(resumed), "--resume_from_checkpoint", str(run / "checkpoint-2")],
        nproc=2,
        timeout=400,
        cwd=tmp_path,
    )
    fields = ("group", "prompt", "completion", "reward", "advantage")
    want = [[r[f] for f in fields] for r in rows(run / "rollouts" / "rollouts.jsonl") if r["step"] == 3]
    got = [[r[f] for f in fields] for r in rows(resumed / "rollouts" / "rollouts.jsonl")]
    assert got == want
    last = rows(resumed / "metrics.jsonl")[-1]
    assert last["dynamic_sampling/batches"] == metrics[-1]["dynamic_sampling/batches"]
