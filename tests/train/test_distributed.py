"""Process-group helpers on a real two-process gloo group (torchrun on localhost, CPU)."""

from __future__ import annotations

import json

import pytest
import torch

from grouprl.train import checkpoint as C
from grouprl.train import parallel as D
from launch import WORKERS, torchrun


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist_helpers")
    torchrun([str(WORKERS / "dist_helpers.py"), str(out)], nproc=2, timeout=180)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)], out


def test_shards_are_contiguous_and_uneven_batches_refused(ranks):
    r0, r1 = ranks[0]
    assert (r0["world"], r1["world"], r0["is_main"], r1["is_main"]) == (2, 2, True, False)
    assert r0["shard"] + r1["shard"] == list(range(8)) and r0["shard"] == [0, 1, 2, 3]
    assert "5 groups per step cannot be split evenly over 2 processes" in r0["uneven"]


def test_reduced_batch_statistics_equal_the_single_process_ones(ranks):
    r0, r1 = ranks[0]
    for r in (r0, r1):
        assert r["token_sum"] == 8.0  # unequal shares (3 + 5)
        assert r["metrics"] == {"loss": 1.5, "reward": 5.0}
        assert r["uneven_metrics"] == {"grad_norm": 1.5, "loss": 4.0, "ratio_max": 2.0, "ratio_min": 0.5}
        assert r["shared_path"] == "built-by-rank-0"


def test_the_learners_loss_weight_makes_ddp_average_equal_the_full_batch_mean(ranks):
    """DDP averages gradients; with 3 vs 5 rows a plain per-rank mean would weigh rows unequally."""
    torch.manual_seed(123)
    xs = torch.randn(8, 3)
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 1, bias=False)
    layer(xs).pow(2).mean().backward()
    for r in ranks[0]:
        assert r["ddp_grad"] == pytest.approx(layer.weight.grad.flatten().tolist(), abs=1e-6)


def test_every_process_rng_stream_is_saved_and_replayed(ranks):
    (r0, r1), out = ranks
    assert r0["n_states"] == r1["n_states"] == 2
    assert r0["restore"] == r1["restore"] == "restored"
    assert r0["replay_equal"] and r1["replay_equal"]
    states = C.read_rng_states(out / "rng.pt")
    assert not torch.equal(states[0]["torch"], states[1]["torch"])  # two distinct streams were kept


def test_resume_with_another_process_count_refuses_unless_reshard(ranks):
    _, out = ranks
    states = C.read_rng_states(out / "rng.pt")
    one = D.ProcessInfo(rank=0, world_size=1)
    with pytest.raises(D.ReshardError, match=r"written by 2 process\(es\), this run has 1.*reshard_on_resume"):
        C.restore_rng_states(states, one, reshard=False, seed=0, step=3)
    assert C.restore_rng_states(states, one, reshard=True, seed=0, step=3) == "reseeded"
    a = torch.rand(2)
    C.restore_rng_states(states, one, reshard=True, seed=0, step=3)
    assert torch.equal(torch.rand(2), a)  # the fresh stream is reproducible


def test_single_process_helpers_are_identities():
    one = D.ProcessInfo()
    t = torch.tensor([1.0, 2.0, 4.0])
    assert D.shard([1, 2, 3], one) == [1, 2, 3]
    assert float(D.all_reduce_sum(t.sum())) == 7.0
    assert D.gather_objects("x") == ["x"] and D.mean_metrics({"a": 2.0}) == {"a": 2.0}
    assert D.broadcast_object("y") == "y"
