"""Rewards from models on two real processes (torch.distributed, gloo on 127.0.0.1), each scoring its own half
of a batch as training does: a judge (the scripted grader on 127.0.0.1), a reward model (a classifier saved
here) and a learned reward from a file (examples/learned_rewards/novelty.py), mixed in one scorer.

What docs/rewards.md promises for several processes: each process's scores are the ones one process would
give the whole batch (so the gathered batch is the same everywhere); the learned reward's state stays
identical on both, equal to one process's after the same batches; each process asks the judge about its
own completions only and appends to its own cache file, and a process started later (a resumed run) reads
every process's file, so the other half of the batch costs it nothing.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from grouprl.records import Episode, Step
from grouprl.rewards.scorer import Scorer
from judge_standin import grader  # noqa: F401 - the fixture
from test_reward_model import save_classifier

pytest.importorskip("openai")

REPO = Path(__file__).resolve().parents[3]
NOVELTY = f"{REPO}/examples/learned_rewards/novelty.py:make_reward"
# 16 answers to one question, 4 groups of 4; the halves share answers, so what one process learns
# changes the other's next scores (the novelty counts) and some judge requests are asked on both.
ANSWERS = ["7", "8", "7", "17", "6", "7", "70", "8", "7", "9", "17", "7", "8", "77", "7", "1"]


def batch() -> list[Episode]:
    out = []
    for i, answer in enumerate(ANSWERS):
        ep = Episode(group_id=i // 4, index_in_group=i % 4, row={"question": "3+4", "ground_truth": "7"})
        ep.steps.append(
            Step(
                prompt_text="p",
                prompt_ids=[1],
                action_text=answer,
                action_ids=[2],
                truncated=False,
                anchor_state=None,
                messages=[{"role": "user", "content": "3+4"}],
            )
        )
        out.append(ep)
    return out


def scorer(rm_dir: str, base_url: str, run_dir: str) -> Scorer:
    judge = {"base_url": base_url, "model": "grader", "concurrency": 4, "timeout": 10, "retries": 1}
    return Scorer(["judge", rm_dir, NOVELTY], [1.0, 1.0, 0.5], reward_kwargs={"judge": judge}, run_dir=run_dir)


def distilled(rm_dir: str, base_url: str, run_dir: str) -> Scorer:
    """Judge distillation: the classifier as the student, the judge on every completion (judge_steps)."""
    options = {
        "student": rm_dir,
        "device": "cpu",
        "judge_steps": 5,
        "learning_rate": 1e-2,
        "updates_per_step": 2,
        "judge": {"base_url": base_url, "model": "grader", "concurrency": 4, "timeout": 10, "retries": 1},
    }
    return Scorer(["distilled_judge"], [1.0], reward_kwargs={"distilled_judge": options}, run_dir=run_dir)


def student_after_two_steps(scorer: Scorer, episodes: list[Episode]) -> dict:
    scores = [scorer.score(episodes).episode.tolist() for _ in range(2)]
    return {
        "scores": scores,
        "student": {k: v.clone() for k, v in scorer.learned[0].student.model.state_dict().items()},
    }


def summary(scores, live: Scorer, rm_dir: str) -> dict:
    return {
        "episode": scores.episode.tolist(),
        "judge": [p.score for p in scores.parts["judge"]],
        "rm": [p.score for p in scores.parts[rm_dir]],
        "calls": scores.metrics["judge/calls"],
        "hits": scores.metrics["judge/cache_hits"],
        "counts": live.learned[0].state_dict()["counts"],
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, rm_dir: str, base_url: str, run_dir: str, out: str) -> None:
    import torch.distributed as dist

    os.environ["RANK"] = str(rank)  # as torchrun sets it: the judge's cache file names its process
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        torch.set_num_threads(1)
        mine = slice(rank * 8, (rank + 1) * 8)
        live = scorer(rm_dir, base_url, run_dir)
        steps = [summary(live.score(batch()[mine]), live, rm_dir) for _ in range(2)]  # two steps, same half
        # A process started later over the same run folder (a resume) scores the other process's half.
        other = slice((1 - rank) * 8, (2 - rank) * 8)
        later = scorer(rm_dir, base_url, run_dir).score(batch()[other]).metrics
        Path(f"{out}/rank{rank}.json").write_text(json.dumps({"steps": steps, "later": later}))
        torch.save(
            student_after_two_steps(distilled(rm_dir, base_url, f"{run_dir}_distill"), batch()[mine]),
            f"{out}/distill{rank}.pt",
        )
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built in")
def test_two_processes_score_like_one_and_keep_learned_state_identical(grader, tmp_path):  # noqa: F811
    rm_dir = str(save_classifier(tmp_path / "rm"))
    run_dir = tmp_path / "run"
    mp.start_processes(
        _worker,
        args=(_free_port(), rm_dir, grader.base_url, str(run_dir), str(tmp_path)),
        nprocs=2,
        start_method="fork",
    )  # fork: no second import of torch and transformers
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    # One process over the whole batch, twice (its own cache folder): the reference.
    alone = scorer(rm_dir, grader.base_url, str(tmp_path / "alone"))
    reference = [summary(alone.score(batch()), alone, rm_dir) for _ in range(2)]
    for step in (0, 1):
        a, b = (ranks[r]["steps"][step] for r in (0, 1))
        for key in ("episode", "judge", "rm"):  # the gathered batch: rank 0's half then rank 1's
            assert a[key] + b[key] == pytest.approx(reference[step][key], abs=1e-6), (step, key)
        assert a["counts"] == b["counts"] == reference[step]["counts"]  # identical state, as one process's
    assert ranks[0]["steps"][1]["episode"] != ranks[0]["steps"][0]["episode"]  # the novelty bonus learned
    assert sum(reference[1]["counts"].values()) == 2 * len(ANSWERS)  # both halves, both steps, once each
    # The judge: each process asked about its own distinct answers once, in its own file.
    for r, half in ((0, ANSWERS[:8]), (1, ANSWERS[8:])):
        steps = ranks[r]["steps"]
        assert steps[0]["calls"] == len(set(half)) and steps[1]["calls"] == 0 and steps[1]["hits"] == len(set(half))
        lines = (run_dir / "judge_cache" / "judge" / f"responses.rank{r}.jsonl").read_text().splitlines()
        assert len(lines) == len(set(half))
    # Judge distillation: the labels are gathered, so both students take the update one student takes on
    # the whole batch (and score as it does).
    one = student_after_two_steps(distilled(rm_dir, grader.base_url, str(tmp_path / "alone_distill")), batch())
    d0, d1 = (torch.load(tmp_path / f"distill{r}.pt") for r in (0, 1))
    assert all(torch.equal(v, d1["student"][k]) for k, v in d0["student"].items())
    assert max(float((v - one["student"][k]).abs().max()) for k, v in d0["student"].items()) < 1e-5
    for step in (0, 1):
        assert d0["scores"][step] + d1["scores"][step] == pytest.approx(one["scores"][step], abs=1e-5)
    start = distilled(rm_dir, grader.base_url, str(tmp_path / "start")).learned[0].student.model.state_dict()
    assert max(float((v - start[k]).abs().max()) for k, v in d0["student"].items()) > 1e-3  # the students learned
    # Started later, each process finds the other's answers in the other's file: nothing is sent.
    for r, other in ((0, ANSWERS[8:]), (1, ANSWERS[:8])):
        assert ranks[r]["later"]["judge/calls"] == 0 and ranks[r]["later"]["judge/cache_hits"] == len(set(other))


def test_two_process_training_run_with_a_judge_a_reward_model_and_a_learned_reward(
    tiny_arithmetic_dir,
    grader,  # noqa: F811
    tmp_path,
):
    """The same three rewards in a real ``torchrun`` training run (2 processes, one group of 4 each a step):
    the same completion gets the same judge and reward-model score on either process, each process's judge
    answers are in its own cache file, and the checkpointed learned state counts both processes' episodes."""
    import yaml

    from launch import torchrun

    rm_dir = str(save_classifier(tmp_path / "rm"))
    judge = {"base_url": grader.base_url, "model": "grader", "concurrency": 4, "timeout": 10, "retries": 1}
    recipe = {
        "rewards": [{"name": "judge", "options": judge}, rm_dir, {"name": NOVELTY, "weight": 0.5}],
        "batch_size": 2,
        "num_generations": 4,
        "max_new_tokens": 4,
        "n_eval": 0,
        "n_train": 40,
        "device": "cpu",
        "seed": 3,
        "learning_rate": 1e-3,
        "save_steps": 2,
        "max_steps": 2,
        "output_dir": str(tmp_path / "run"),
    }
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    torchrun(
        [
            "-m",
            "grouprl.cli",
            "train",
            "--config",
            str(tmp_path / "r.yaml"),
            "--model_name_or_path",
            str(tiny_arithmetic_dir),
        ],
        nproc=2,
        timeout=400,
        cwd=tmp_path,
    )
    run = tmp_path / "run"
    rollouts = [json.loads(line) for line in (run / "rollouts" / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 16 and all(r["reward_errors"] == [] for r in rollouts)
    seen: dict[tuple, tuple] = {}
    for r in rollouts:  # a deterministic reward: one score per (prompt, completion), whichever process asked
        scores = (r["rewards"]["judge"], r["rewards"][rm_dir])
        assert seen.setdefault((r["prompt"], r["completion"]), scores) == scores
    cached = [
        (run / "judge_cache" / "judge" / f"responses.rank{rank}.jsonl").read_text().splitlines() for rank in (0, 1)
    ]
    assert all(cached) and sum(map(len, cached)) == len(seen)  # each asked by the process that rolled it out, once
    state = torch.load(run / "checkpoint-2" / "learned_rewards.pt", weights_only=False)
    assert sum(state["learned_rewards"]["learned"]["novelty"]["counts"].values()) == 16  # both processes' episodes
