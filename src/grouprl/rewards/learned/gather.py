"""Learned rewards train on the whole batch, every process's part of it (so they stay identical on
every process without a broadcast): each gathers what it learns from itself, in rank order."""

from __future__ import annotations

from typing import Any

import torch


def gather_across_processes(items: list[Any]) -> list[Any]:
    """Every process's ``items``, concatenated in rank order, when torch.distributed runs; else ``items``."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return items
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, items)
    return [item for part in gathered for item in part]
