"""Process-group helpers for data-parallel training (``accelerate launch``, ``torchrun``, SLURM).

One training step's batch of B groups is cut into ``world_size`` contiguous shards of
B / world_size groups: a group never spans processes, so every group statistic (mean, std,
anchor groups) stays local and exact. What is *batch*-level (``scale_rewards: batch``'s std,
the dapo token count, the number of samples a mean runs over) is reduced here, so that the
update of N processes equals the single-process update on the concatenated batch.

With one process (no ``torch.distributed`` group) every helper is the identity, so the
single-process path runs the same code.
"""

from __future__ import annotations

import functools
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from grouprl.config import ConfigError

T = TypeVar("T")


class ReshardError(ConfigError):
    """A batch that cannot be split over the processes, or a checkpoint from another process count."""


@dataclass(frozen=True)
class ProcessInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def process_info() -> ProcessInfo:
    """This process's place: from the initialised process group, else the launcher's environment
    (``RANK``/``WORLD_SIZE``/``LOCAL_RANK``, set by torchrun and accelerate), else one process."""
    if dist.is_available() and dist.is_initialized():
        return ProcessInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
    env = os.environ
    return ProcessInfo(int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0)))


def init_processes(cpu: bool | None = None) -> ProcessInfo:
    """Join the launcher's process group through accelerate (gloo on CPU, nccl on CUDA).

    A plain ``python -m grouprl.cli train`` (no ``WORLD_SIZE``) starts no group at all."""
    if int(os.environ.get("WORLD_SIZE", 1)) > 1 and not dist.is_initialized():
        from accelerate import PartialState

        PartialState(cpu=not torch.cuda.is_available() if cpu is None else cpu)
    return process_info()


# --- sharding ------------------------------------------------------------------------------

def shard_slice(n_groups: int, info: ProcessInfo) -> slice:
    """This process's contiguous share of ``n_groups`` groups; refuses an uneven split, because
    unequal shares would change the weight each process's samples get in the averaged update."""
    if n_groups % info.world_size:
        raise ReshardError(f"batch_size: {n_groups} groups per step cannot be split evenly over "
                           f"{info.world_size} processes; use a multiple of {info.world_size}")
    per = n_groups // info.world_size
    return slice(info.rank * per, (info.rank + 1) * per)


def shard(items: Sequence[T], info: ProcessInfo) -> list[T]:
    """The process's share of a step's rows (every process draws the same rows in the same order
    from one seeded sampler, so the data position is global and identical everywhere)."""
    return list(items[shard_slice(len(items), info)])


# --- reductions ----------------------------------------------------------------------------

def all_reduce_sum(value: torch.Tensor | float) -> torch.Tensor:
    """Sum over processes (a copy; the input is untouched)."""
    t = torch.as_tensor(value, dtype=torch.float64 if not torch.is_tensor(value) else None).clone()
    if _active():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def all_gather_cat(t: torch.Tensor) -> torch.Tensor:
    """Concatenate every process's tensor along dim 0, in rank order (shares may differ in length).

    Exact: values are copied, never summed, so e.g. the std of the result is the std the single
    process would compute on the whole batch."""
    if not _active():
        return t.clone()
    world = dist.get_world_size()
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([t.shape[0]], dtype=torch.long))
    longest = int(max(int(s) for s in sizes))
    padded = torch.zeros((longest, *t.shape[1:]), dtype=t.dtype)
    padded[: t.shape[0]] = t
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat([p[: int(s)] for p, s in zip(parts, sizes)])


def batch_std(scores: torch.Tensor) -> torch.Tensor:
    """The unbiased std of the whole step's scores across processes (``scale_rewards: batch``)."""
    everything = all_gather_cat(scores)
    return everything.std() if everything.numel() > 1 else everything.new_zeros(())


def gather_objects(obj: T) -> list[T]:
    """Every process's ``obj`` (picklable), in rank order, on every process."""
    if not _active():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: T, src: int = 0) -> T:
    """Process ``src``'s ``obj`` on every process (e.g. the path of a model only rank 0 built)."""
    if not _active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def mean_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """Per-process metrics combined: the mean over the processes that report a key (one whose
    micro-batches were all skipped as non-finite reports fewer), the max of ``*_max`` keys and
    the min of ``*_min`` keys."""
    if not _active():
        return dict(metrics)
    everyone = gather_objects({k: float(v) for k, v in metrics.items()})
    out: dict[str, float] = {}
    for key in sorted({k for m in everyone for k in m}):
        values = [m[key] for m in everyone if key in m]
        out[key] = max(values) if key.endswith("_max") else min(values) if key.endswith("_min") \
            else sum(values) / len(values)
    return out


def loss_weight(local_count: float, global_count: float, world_size: int) -> float:
    """Factor on a loss that averages over ``local_count`` items so that DDP's gradient *average*
    over ``world_size`` processes equals the gradient of the mean over all ``global_count`` items:
    (1/W) * sum_p w_p * mean_p = sum_p local_p / global * mean_p with w_p = W * local_p / global."""
    return world_size * local_count / global_count


def barrier() -> None:
    if _active():
        dist.barrier()


def end_processes() -> None:
    """Leave the process group: wait for every process, then destroy the group. A gloo group left to
    the interpreter's exit aborted a process now and then ("terminate called without an active
    exception", exit -6, after its work was done: 2 of 12 two-process test runs)."""
    if _active():
        dist.barrier()
        dist.destroy_process_group()


def main_only(fn: Callable[..., T]) -> Callable[..., T | None]:
    """Run ``fn`` on process 0 only (logs, rollouts, trajectories, checkpoints); others get None."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) if process_info().is_main else None

    return wrapper


def on_main_then_share(fn: Callable[[], T]) -> T:
    """``fn()`` on process 0 (e.g. build and SFT the tiny model), its result sent to every process;
    the others wait instead of racing to write the same files."""
    result = fn() if process_info().is_main else None
    return broadcast_object(result)


# --- RNG state per process -----------------------------------------------------------------

RNG_FILE = "rng.pt"


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_process(seed: int, step: int, rank: int) -> None:
    """A fresh, reproducible stream for (seed, step, rank): used when resuming with another count."""
    mixed = (seed * 1_000_003 + step * 7919 + rank) % (2**31 - 1)
    random.seed(mixed)
    np.random.seed(mixed)
    torch.manual_seed(mixed)


def save_rng_states(path: str | Path) -> None:
    """Collective: every process's RNG state, written by process 0 as ``{"world_size", "states"}``."""
    states = gather_objects(rng_state())
    if process_info().is_main:
        torch.save({"world_size": len(states), "states": states}, Path(path))


def read_rng_states(path: str | Path) -> list[dict[str, Any]]:
    """The per-process states of a checkpoint; a single-process checkpoint of the older format
    (one bare state) reads as one process."""
    saved = torch.load(Path(path), weights_only=False)
    return saved["states"] if "states" in saved else [saved]


def check_world_size(saved: int, info: ProcessInfo, reshard: bool, where: str = "checkpoint") -> None:
    """Refuse to resume a checkpoint of ``saved`` processes with another count, unless ``reshard``."""
    if saved != info.world_size and not reshard:
        raise ReshardError(
            f"{where} was written by {saved} process(es), this run has {info.world_size}: the sampling "
            f"RNG streams of each process cannot be split or merged exactly. Relaunch with {saved} "
            f"process(es), or set reshard_on_resume: true to continue the same data order with fresh "
            f"per-process streams seeded from (seed, step, rank)")


def restore_rng_states(states: list[dict[str, Any]], info: ProcessInfo, reshard: bool, seed: int, step: int,
                       where: str = "checkpoint") -> str:
    """Resume each process's RNG stream. Same process count: exact. Another count: the data
    position still continues exactly (it is global), but per-process sampling streams cannot be
    split or merged, so refuse unless ``reshard`` asks for fresh (seed, step, rank) streams."""
    if len(states) == info.world_size:
        set_rng_state(states[info.rank])
        return "restored"
    check_world_size(len(states), info, reshard, where)
    seed_process(seed, step, info.rank)
    return "reseeded"
