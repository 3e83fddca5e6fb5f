"""save_total_limit rotation (never the best, the last, or one still uploading) and the eval helpers."""

from __future__ import annotations

import json
import math

from types import SimpleNamespace

from grouprl.job.checkpoint_observers import CheckpointRotation, checkpoints, rotate
from grouprl.job.evaluate import pass_at_k
from grouprl.job.periodic_eval import BEST, eval_subset


def make(out, steps):
    for s in steps:
        (out / f"checkpoint-{s}").mkdir(parents=True)
        (out / f"checkpoint-{s}" / "model.safetensors").write_bytes(b"w")
    (out / ".checkpoint-99.tmp").mkdir()  # a save in progress is not a checkpoint


def names(out):
    return [p.name for _, p in checkpoints(out)]


def test_keeps_the_newest_and_the_best(tmp_path):
    make(tmp_path, [2, 4, 6, 8, 10])
    (tmp_path / BEST).write_text(json.dumps({"step": 4, "metric": "eval/accuracy", "value": 0.5}))
    deleted = rotate(tmp_path, limit=2)
    assert sorted(p.name for p in deleted) == ["checkpoint-2", "checkpoint-6"]
    assert names(tmp_path) == ["checkpoint-4", "checkpoint-8", "checkpoint-10"]  # numeric order, not text
    assert (tmp_path / ".checkpoint-99.tmp").is_dir()


def test_limit_one_keeps_the_last_and_spares_uploads_in_flight(tmp_path):
    make(tmp_path, [1, 2, 3])
    rotate(tmp_path, limit=1, keep={2})
    assert names(tmp_path) == ["checkpoint-2", "checkpoint-3"]
    rotate(tmp_path, limit=1)  # the upload finished: now it may go
    assert names(tmp_path) == ["checkpoint-3"]


def test_a_checkpoint_spared_for_its_upload_goes_at_the_end_of_the_run(tmp_path):
    # The race CI hit: the last save came while step 2's upload was still running, so step 2
    # survived that rotation; the run's end (after the uploads were waited for) must remove it.
    make(tmp_path, [1, 2, 3])
    uploading = {2}
    rotation = CheckpointRotation(1, busy=lambda: set(uploading))
    trainer = SimpleNamespace(out=tmp_path, step=3)
    rotation.after_checkpoint(trainer, tmp_path / "checkpoint-3")
    assert names(tmp_path) == ["checkpoint-2", "checkpoint-3"]
    uploading.clear()
    rotation.after_train(trainer)
    assert names(tmp_path) == ["checkpoint-3"]


def test_pass_at_k_matches_the_unbiased_estimator():
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0
    assert math.isclose(pass_at_k(10, 3, 1), 0.3)
    assert math.isclose(pass_at_k(5, 2, 2), 1 - math.comb(3, 2) / math.comb(5, 2))  # 0.7


def test_eval_subset_is_seeded_and_ordered():
    rows = [{"i": i} for i in range(50)]
    a, b = eval_subset(rows, 10, seed=1), eval_subset(rows, 10, seed=1)
    assert a == b and len(a) == 10 and [r["i"] for r in a] == sorted(r["i"] for r in a)
    assert eval_subset(rows, 10, seed=2) != a
    assert eval_subset(rows, None, seed=1) == rows and eval_subset(rows, 500, seed=1) == rows
