"""Two real processes (torch.distributed, gloo on 127.0.0.1) see different episodes; after the
discriminator's update both hold the same weights, because each gathers every process's examples."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp

from test_discriminator import answer, disc_dir, episode, rows, wrong  # noqa: F401 - shared fixtures, builders


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, disc_dir: str, rows: list, out: str) -> None:
    import torch.distributed as dist

    from grouprl.rewards.learned.discriminator import GailDiscriminator

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        torch.set_num_threads(1)
        disc = GailDiscriminator(disc_dir, learning_rate=1e-2, device="cpu", seed=0)
        mine = rows[rank * 4 : (rank + 1) * 4]  # each process its own batch
        metrics = disc.update([episode(r, answer(wrong(r)), group=g) for g, r in enumerate(mine)])
        torch.save({"model": disc.model.state_dict(), "metrics": metrics}, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built in")
def test_discriminator_copies_stay_identical_across_processes(rows, disc_dir, tmp_path):
    mp.start_processes(
        _worker, args=(_free_port(), str(disc_dir), rows[:8], str(tmp_path)), nprocs=2, start_method="fork"
    )  # fork: no second import of torch and transformers
    a, b = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    assert a["metrics"]["disc/positives"] == 8 == b["metrics"]["disc/positives"]  # both saw all 8 rows
    assert all(torch.equal(v, b["model"][k]) for k, v in a["model"].items())
    # and they moved from the start: an update happened
    from grouprl.rewards.learned.discriminator import GailDiscriminator

    start = GailDiscriminator(str(disc_dir), device="cpu", seed=0).model.state_dict()
    assert not all(torch.equal(v, start[k]) for k, v in a["model"].items())
