"""Data-parallel training: every collective, and what each process of a multi-process run does differently.

Launched by ``accelerate launch`` or ``torchrun`` (see docs/scaling.md), every process:

- draws the same B rows from the one seeded sampler and generates and scores its contiguous
  share of B / N groups (a group never spans processes, so every group statistic stays local and exact);
- gathers the step's episodes, so that advantages (any estimator, ``scale_rewards: batch``
  included), learned-reward updates and logged metrics are computed on the whole batch exactly
  as one process would, and keeps its own share of the advantages;
- trains through a DDP (or FSDP2) wrapper whose gradient average, with the learner's loss
  weights, equals the single-process gradient.

Process 0 alone writes logs, rollouts, trajectories and checkpoints. One process (no launcher)
gets :data:`SINGLE`: no process group, and every helper here is the identity, so the
single-process path runs the same code.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence, TypeVar

import torch
import torch.distributed as dist

from grouprl.config import ConfigError
from grouprl.train.fsdp import fsdp_requested, shard_fully
from grouprl.records import Episode

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


def end_processes(*, exit_process: bool = False) -> None:
    """Leave the process group: wait for every process, then destroy the group. A gloo group left to
    the interpreter's exit aborted a process now and then ("terminate called without an active
    exception", exit -6, after its work was done: 2 of 12 two-process test runs); collecting garbage
    first frees the pending work objects FSDP and DDP keep in reference cycles while the group is
    alive. ``exit_process``: then leave at once (``os._exit(0)`` after flushing), skipping the
    interpreter's finalisation, where gloo's threads can still abort (seen once in CI under FSDP even
    after the destroy) -- for worker scripts whose results are already on disk."""
    if _active():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
        gc.collect()
    if exit_process:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


# --- sharding ------------------------------------------------------------------------------


def shard_slice(n_groups: int, info: ProcessInfo) -> slice:
    """This process's contiguous share of ``n_groups`` groups; refuses an uneven split, because
    unequal shares would change the weight each process's samples get in the averaged update."""
    if n_groups % info.world_size:
        raise ReshardError(
            f"batch_size: {n_groups} groups per step cannot be split evenly over "
            f"{info.world_size} processes; use a multiple of {info.world_size}"
        )
    per = n_groups // info.world_size
    return slice(info.rank * per, (info.rank + 1) * per)


def shard(items: Sequence[T], info: ProcessInfo) -> list[T]:
    """The process's share of a step's rows (every process draws the same rows in the same order
    from one seeded sampler, so the data position is global and identical everywhere)."""
    return list(items[shard_slice(len(items), info)])


# --- collectives ---------------------------------------------------------------------------


def all_reduce_sum(value: torch.Tensor | float) -> torch.Tensor:
    """Sum over processes (a copy; the input is untouched)."""
    t = torch.as_tensor(value, dtype=torch.float64 if not torch.is_tensor(value) else None).clone()
    if _active():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


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
        out[key] = (
            max(values) if key.endswith("_max") else min(values) if key.endswith("_min") else sum(values) / len(values)
        )
    return out


def barrier() -> None:
    if _active():
        dist.barrier()


# --- the run's processes -------------------------------------------------------------------


@dataclass
class DataParallel:
    info: ProcessInfo = field(default_factory=ProcessInfo)
    accelerator: Any = None  # accelerate.Accelerator when several processes run
    fsdp: bool = False

    @classmethod
    def start(cls) -> "DataParallel":
        """Join the launcher's process group (a plain run: one process, no group)."""
        if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() in ("1", "true"):
            # accelerate's prepare_model leaves a DeepSpeed model unwrapped: the processes' gradients
            # would never be averaged (and ZeRO-3's partitioned weights never gathered).
            raise ConfigError(
                "accelerate config: DeepSpeed (zero3.yaml) is not driven by grouprl's trainer; "
                "use recipes/accelerate_configs/fsdp.yaml (FSDP2 full shard: parameters, "
                "gradients and optimizer state split across processes) or ddp.yaml"
            )
        info = init_processes()
        if not info.distributed:
            return cls(info)
        from accelerate import Accelerator
        from accelerate.utils import DistributedDataParallelKwargs

        # Buffers (rotary tables) are identical everywhere: no broadcast before each forward,
        # which would also make every process's forward count part of the protocol.
        ddp = DistributedDataParallelKwargs(broadcast_buffers=False)
        accelerator = Accelerator(cpu=not torch.cuda.is_available(), kwargs_handlers=[ddp])
        return cls(info, accelerator, fsdp=fsdp_requested())

    @property
    def device(self) -> torch.device | None:
        """The process's device when several run (cuda:<local rank>, or cpu); None: the config decides."""
        return self.accelerator.device if self.accelerator is not None else None

    @property
    def distributed(self) -> bool:
        return self.info.distributed

    @property
    def is_main(self) -> bool:
        return self.info.is_main

    # --- the model ---------------------------------------------------------------------------
    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module the training forward runs through: DDP, FSDP2, or the model itself."""
        if not self.distributed:
            return model
        if self.fsdp:
            return shard_fully(model)
        return self.accelerator.prepare_model(model)

    @contextlib.contextmanager
    def accumulate(self, wrapped: torch.nn.Module, sync: bool) -> Iterator[None]:
        """Backward without the gradient all-reduce (``sync=False``: a micro-batch that is not the
        last), so each process syncs once per optimizer step however many micro-batches it has."""
        if not self.distributed or sync:
            yield
            return
        no_sync = getattr(wrapped, "no_sync", None)  # DDP
        set_sync = getattr(wrapped, "set_requires_gradient_sync", None)  # FSDP2
        if no_sync is not None:
            with no_sync():
                yield
        elif set_sync is not None:
            set_sync(False)
            try:
                yield
            finally:
                set_sync(True)
        else:
            yield

    def clip_grad_norm(self, wrapped: torch.nn.Module, max_norm: float) -> float:
        """Pre-clip norm of the synchronised gradient (FSDP2: of the full, unsharded gradient)."""
        norm = torch.nn.utils.clip_grad_norm_([p for p in wrapped.parameters() if p.grad is not None], max_norm)
        if hasattr(norm, "full_tensor"):  # a DTensor under FSDP2
            norm = norm.full_tensor()
        return float(norm)

    @property
    def sharded(self) -> bool:
        """Parameters and optimizer state are split across processes (FSDP)."""
        return self.distributed and (
            self.fsdp or getattr(getattr(self.accelerator, "state", None), "distributed_type", None) == "FSDP"
        )

    def full_state(self, learner) -> tuple[dict | None, dict | None]:
        """Collective under FSDP: the full model and optimizer state dicts (on CPU) for process 0 to
        save in the single-device format; (None, None) where each process holds everything."""
        if not self.sharded:
            return None, None
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return (
            get_model_state_dict(learner.model, options=options),
            get_optimizer_state_dict(learner.model, learner.optimizer, options=options),
        )

    # --- the batch ---------------------------------------------------------------------------
    def rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """This process's share of the step's rows."""
        return shard(rows, self.info)

    def globalize(self, episodes: list[Episode], attached: Any = None) -> tuple["GlobalBatch", list[Any]]:
        """Every process's episodes, concatenated in rank order (their groups were numbered across the
        processes where they were born), and what is ``attached`` to them, e.g. their verdicts: one value
        per process, in rank order."""
        if not self.distributed:
            return GlobalBatch(episodes, 0, len(episodes)), [attached]
        shares = gather_objects((episodes, attached))
        start = sum(len(s) for s, _ in shares[: self.info.rank])
        everything = [ep for share, _ in shares for ep in share]
        # Our own share stays the objects we hold.
        everything[start : start + len(episodes)] = episodes
        return GlobalBatch(everything, start, start + len(episodes)), [a for _, a in shares]

    def micro_batches(self, local_samples: int, accumulation: int) -> int:
        """One micro-batch count for every process (FSDP needs equal forward counts): the configured
        accumulation, at most the smallest share's sample count."""
        smallest = min(gather_objects(local_samples)) if self.distributed else local_samples
        return max(1, min(accumulation, smallest))

    def total(self, value: float) -> float:
        return float(all_reduce_sum(float(value)))

    def mean_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        return mean_metrics(metrics)


@dataclass
class GlobalBatch:
    """Every process's episodes of one step, in rank order; ``[start, stop)`` are this process's."""

    episodes: list[Episode]
    start: int
    stop: int

    @property
    def local(self) -> list[Episode]:
        return self.episodes[self.start : self.stop]

    def local_steps(self) -> slice:
        """This process's rows in per-step tensors of the whole batch (steps contiguous per episode)."""
        before = sum(len(ep.steps) for ep in self.episodes[: self.start])
        return slice(before, before + sum(len(ep.steps) for ep in self.local))


SINGLE = DataParallel()
