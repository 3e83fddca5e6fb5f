"""FSDP2 for a multi-process run: whether the launcher asked for it, and the full shard it asks for.

``train/parallel.py:DataParallel`` wraps the policy in DDP, or shards it here when accelerate's FSDP config
launched the run (recipes/accelerate_configs/fsdp.yaml).
"""

from __future__ import annotations

import os

import torch


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

    units = set(
        getattr(model, "_no_split_modules", None)
        or getattr(getattr(model, "base_model", None), "_no_split_modules", None)
        or []
    )
    for tensor in [*model.parameters(), *model.buffers()]:  # as DDP does: process 0's initial values everywhere
        torch.distributed.broadcast(tensor.data, src=0)
    for module in model.modules():
        if type(module).__name__ in units:
            fully_shard(module)
    fully_shard(model)
    return model
