"""Run by tests/train/test_distributed.py under ``torchrun --nproc_per_node 2``: exercises the process-group
helpers on a real gloo group and writes what each rank saw to OUT/rank{R}.json for the test to check."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from grouprl.train import checkpoint as C
from grouprl.train import parallel as D


def ddp_grad(info: D.ProcessInfo, xs: torch.Tensor) -> list[float]:
    """One DDP backward of mean((w . x)^2) over this rank's rows, weighted as the learner weighs a
    mean loss (share of the batch x world size): DDP's gradient average then equals the full-batch mean's."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 1, bias=False)
    model = torch.nn.parallel.DistributedDataParallel(layer)
    global_n = float(D.all_reduce_sum(float(len(xs))))
    loss = model(xs).pow(2).mean() * len(xs) / global_n * info.world_size
    loss.backward()
    return layer.weight.grad.flatten().tolist()


def main(out: Path) -> None:
    info = D.init_processes(cpu=True)
    r = info.rank
    rows = list(range(8))
    # Unequal shares on purpose: rank 0 has 3 scores, rank 1 has 5.
    torch.manual_seed(123)
    everything = torch.randn(8, 3)
    mine = everything[:3] if r == 0 else everything[3:]
    result = {
        "rank": r,
        "world": info.world_size,
        "is_main": info.is_main,
        "shard": D.shard(rows, info),
        "token_sum": float(D.all_reduce_sum(float(len(mine)))),
        "metrics": D.mean_metrics({"loss": float(r + 1), "reward": 10.0 * r}),
        # rank 1 skipped every micro-batch (no loss); ratios: the batch's max and min, not their means
        "uneven_metrics": D.mean_metrics(
            {"grad_norm": 1.0 + r, "ratio_max": 1.0 + r, "ratio_min": 0.5 + r, **({"loss": 4.0} if r == 0 else {})}
        ),
        "shared_path": D.broadcast_object(f"built-by-rank-{D.process_info().rank}" if info.is_main else None),
        "ddp_grad": ddp_grad(info, mine),
    }
    try:
        D.shard(list(range(5)), info)
        result["uneven"] = None
    except D.ReshardError as err:
        result["uneven"] = str(err)
    # RNG: each rank seeds its own stream, the states are saved, the stream is advanced, restored, replayed.
    torch.manual_seed(1000 + r)
    states = D.gather_objects(C.rng_state())  # as Trainer.checkpoint gathers them for process 0 to write
    if info.is_main:
        C.write_rng_states(out / "rng.pt", states)
    D.barrier()
    first = torch.rand(3).tolist()
    states = C.read_rng_states(out / "rng.pt")
    result["restore"] = C.restore_rng_states(states, info, reshard=False, seed=0, step=0)
    result["replay_equal"] = torch.rand(3).tolist() == first
    result["n_states"] = len(states)
    (out / f"rank{r}.json").write_text(json.dumps(result))
    D.barrier()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    D.end_processes(exit_process=True)
