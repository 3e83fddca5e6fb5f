"""Data-parallel training: what each process of a multi-process run does differently.

Launched by ``accelerate launch`` or ``torchrun`` (see docs/scaling.md), every process:

- draws the same B rows from the one seeded sampler and generates and scores its contiguous
  share of B / N groups (a group never spans processes);
- gathers the step's episodes, so that advantages (any estimator, ``scale_rewards: batch``
  included), learned-reward updates and logged metrics are computed on the whole batch exactly
  as one process would, and keeps its own share of the advantages;
- trains through a DDP (or FSDP2) wrapper whose gradient average, with the loss weights from
  :func:`grouprl.train.distributed.loss_weight`, equals the single-process gradient.

Process 0 alone writes logs, rollouts, trajectories and checkpoints. One process (no launcher)
gets :data:`SINGLE`, whose every method is the identity.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from grouprl.config import ConfigError
from grouprl.records import Episode
from grouprl.train import distributed as D


def fsdp_requested() -> bool:
    """``accelerate launch --config_file recipes/accelerate_configs/fsdp.yaml`` sets this."""
    return os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true")


def shard_fully(model: torch.nn.Module) -> torch.nn.Module:
    """FSDP2 full shard as accelerate's fsdp.yaml asks for it (one unit per decoder layer, then the
    root), applied with PyTorch's ``fully_shard`` directly, on CPU and on CUDA alike: accelerate
    runs FSDP configs as plain DDP without CUDA, and with CUDA its ``prepare_model`` refuses FSDP2
    ("FSDP2 preparation should be done via `accelerate.prepare()`", it wants the optimizer too),
    while grouprl builds the optimizer on the sharded parameters afterwards."""
    from torch.distributed.fsdp import fully_shard

    units = set(getattr(model, "_no_split_modules", None) or
                getattr(getattr(model, "base_model", None), "_no_split_modules", None) or [])
    for tensor in [*model.parameters(), *model.buffers()]:  # as DDP does: process 0's initial values everywhere
        torch.distributed.broadcast(tensor.data, src=0)
    for module in model.modules():
        if type(module).__name__ in units:
            fully_shard(module)
    fully_shard(model)
    return model


@dataclass
class DataParallel:
    info: D.ProcessInfo = field(default_factory=D.ProcessInfo)
    accelerator: Any = None  # accelerate.Accelerator when several processes run
    fsdp: bool = False

    @classmethod
    def start(cls) -> "DataParallel":
        """Join the launcher's process group (a plain run: one process, no group)."""
        if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() in ("1", "true"):
            # accelerate's prepare_model leaves a DeepSpeed model unwrapped: the processes' gradients
            # would never be averaged (and ZeRO-3's partitioned weights never gathered).
            raise ConfigError("accelerate config: DeepSpeed (zero3.yaml) is not driven by grouprl's trainer; "
                              "use recipes/accelerate_configs/fsdp.yaml (FSDP2 full shard: parameters, "
                              "gradients and optimizer state split across processes) or ddp.yaml")
        info = D.init_processes()
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
        elif hasattr(wrapped, "no_sync"):  # DDP
            with wrapped.no_sync():
                yield
        elif hasattr(wrapped, "set_requires_gradient_sync"):  # FSDP2
            wrapped.set_requires_gradient_sync(False)
            try:
                yield
            finally:
                wrapped.set_requires_gradient_sync(True)
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
        return self.distributed and (self.fsdp or getattr(getattr(self.accelerator, "state", None),
                                                          "distributed_type", None) == "FSDP")

    def full_state(self, learner) -> tuple[dict | None, dict | None]:
        """Collective under FSDP: the full model and optimizer state dicts (on CPU) for process 0 to
        save in the single-device format; (None, None) where each process holds everything."""
        if not self.sharded:
            return None, None
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                             get_optimizer_state_dict)

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return (get_model_state_dict(learner.model, options=options),
                get_optimizer_state_dict(learner.model, learner.optimizer, options=options))

    def load_checkpoint(self, ckpt, learner, scorer) -> dict[str, Any]:
        """Optimizer, scheduler and learned state from a checkpoint; under FSDP each process takes its
        shard of the full optimizer state."""
        from grouprl.train.checkpoint import load_checkpoint

        if not self.sharded:
            return load_checkpoint(ckpt, learner.optimizer, learner.scheduler, scorer)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        state = load_checkpoint(ckpt, _NoOptimizer(), learner.scheduler, scorer)
        full = torch.load(os.path.join(ckpt, "optimizer.pt"), weights_only=False)
        set_optimizer_state_dict(learner.model, learner.optimizer, full,
                                 options=StateDictOptions(full_state_dict=True))
        return state

    # --- the batch ---------------------------------------------------------------------------
    def rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """This process's share of the step's rows."""
        return D.shard(rows, self.info)

    def globalize(self, episodes: list[Episode], groups_per_process: int) -> "GlobalBatch":
        """Renumber this process's groups as in the whole batch, then gather every process's episodes."""
        for ep in episodes:
            ep.group_id += self.info.rank * groups_per_process
        if not self.distributed:
            return GlobalBatch(episodes, 0, len(episodes))
        shares = D.gather_objects(episodes)
        start = sum(len(s) for s in shares[: self.info.rank])
        everything = [ep for share in shares for ep in share]
        # Our own share stays the objects we hold (later phases write onto them).
        everything[start:start + len(episodes)] = episodes
        return GlobalBatch(everything, start, start + len(episodes))

    def micro_batches(self, local_samples: int, accumulation: int) -> int:
        """One micro-batch count for every process (FSDP needs equal forward counts): the configured
        accumulation, at most the smallest share's sample count."""
        smallest = min(D.gather_objects(local_samples)) if self.distributed else local_samples
        return max(1, min(accumulation, smallest))

    def total(self, value: float) -> float:
        return float(D.all_reduce_sum(float(value)))

    def mean_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        return D.mean_metrics(metrics)


@dataclass
class GlobalBatch:
    """Every process's episodes of one step, in rank order; ``[start, stop)`` are this process's."""

    episodes: list[Episode]
    start: int
    stop: int

    @property
    def local(self) -> list[Episode]:
        return self.episodes[self.start:self.stop]

    def local_steps(self) -> slice:
        """This process's rows in per-step tensors of the whole batch (steps contiguous per episode)."""
        before = sum(len(ep.steps) for ep in self.episodes[: self.start])
        return slice(before, before + sum(len(ep.steps) for ep in self.local))


LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                 "MASTER_ADDR", "MASTER_PORT")


def warm_start_alone(cfg) -> str:
    """Build and SFT the tiny model in a child process that is no part of the process group.

    Process 0 calls this while the others wait: TRL's SFT trainer, run inside a launched
    process, would see the group and wait for the others' gradients forever."""
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCHER_VARS and not k.startswith(("TORCHELASTIC_", "ACCELERATE_"))}
    proc = subprocess.run([sys.executable, "-m", "grouprl.train.data_parallel", json.dumps(cfg.model_dump())],
                          env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the tiny model's warm start failed (exit {proc.returncode}); see its output above")
    return proc.stdout.strip().splitlines()[-1]


def _warm_start_main(dumped: str) -> None:
    from rich.console import Console

    import grouprl.tasks  # noqa: F401 - the registered tasks and their config sections
    from grouprl.config import Config
    from grouprl.rewards.scorer import Scorer
    from grouprl.tasks import load_task
    from grouprl.train.warm_start import prepare_tiny

    cfg = Config.model_validate(json.loads(dumped))
    task = load_task(cfg)
    print(prepare_tiny(cfg, task, Scorer.from_config(cfg, task), Console(stderr=True)))


class _NoOptimizer:
    """Stands in for the optimizer when its (full) state is loaded separately, shard by shard."""

    def load_state_dict(self, state: dict) -> None:
        pass


SINGLE = DataParallel()


if __name__ == "__main__":  # warm_start_alone's child
    _warm_start_main(sys.argv[1])
