"""oneDNN matrix products for the linear layers of a model while it generates on CPU.

Why: a decode step multiplies a few rows (1 to a few hundred tokens) by every weight matrix of the model. At
those shapes ATen's fp32 CPU ``linear`` (an MKL sgemm call) moved SmolLM2-135M's 537 MB of linear weights at
7-12 GB/s on this 2-core machine, where a plain read of the same bytes runs at 22-28 GB/s; oneDNN's
inner-product primitive (``torch.ops.mkldnn._linear_pointwise``, the kernel torch.compile's CPU backend calls
for bf16 linears) did the same products 1.3-1.5x faster at 2 threads (a whole decode pass at 8 rows: 39 ms
against 59 ms; docs/performance.md, "oneDNN for generation's matrix products"). It reads the same plain
weight tensor (nothing is repacked or copied) and computes the same fp32 products in another summation order:
the difference is fp32 rounding (8e-5 against an fp64 reference on 576-wide dot products of unit normals,
MKL's 4e-5), the kind batch size already changes.

Where: ``rollout/generation.generate`` enters :func:`onednn_linears` around every HF generation (the decode
loop, ``model.generate``, the conversation turn cache), so it covers evaluation, training rollouts and the
asynchronous producer's copy. The layers take it only while grad is off and only on the thread inside the
block, so a learner training the same modules on another thread keeps ATen's kernels, and every training
forward and backward is untouched. ``speed.onednn_generation: false`` turns it off.

Below ``MIN_WEIGHTS`` elements a matrix stays on ATen: oneDNN's ~10 us per call outweighs its gain on
matrices that small (the tiny model's 128-wide layers: 2-3x slower per call in isolation).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

MIN_WEIGHTS = 100_000  # SmolLM2's 192 x 576 key/value projections and up take oneDNN; the tiny model's do not

_state = threading.local()  # per thread: how many onednn_linears blocks are open


def _find_kernel():
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):  # a build without the op
        return None


_KERNEL = _find_kernel()
_PLAIN = (torch.Tensor, nn.Parameter)  # not a DTensor (FSDP shards), not a quantized or other subclass


class OneDNNLinear(nn.Linear):
    """``nn.Linear`` whose no-grad fp32 CPU forward runs through oneDNN inside :func:`onednn_linears` (on the
    thread that opened it); anywhere else exactly ``nn.Linear.forward``. The same parameters and state dict."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if (
            getattr(_state, "open", 0)
            and not torch.is_grad_enabled()
            and input.is_cpu
            and input.dtype == torch.float32
            and weight.dtype == torch.float32
            and type(weight) in _PLAIN
            and weight.numel() >= MIN_WEIGHTS
            and input.dim() >= 2
        ):
            return _KERNEL(input, weight, self.bias, "none", [], "")
        return F.linear(input, weight, self.bias)


def use_onednn_layers(model: nn.Module) -> None:
    """Turn every plain ``nn.Linear`` of ``model`` into a :class:`OneDNNLinear` (its class only: parameters,
    hooks and state dict stay). Subclasses (LoRA wrappers, quantized layers) are left as they are; the plain
    linears inside them are turned."""
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = OneDNNLinear


@contextmanager
def onednn_linears(model: nn.Module, enabled: bool = True) -> Iterator[None]:
    """Inside the block, this thread's no-grad forwards of ``model``'s fp32 CPU linear layers run through
    oneDNN. A no-op where ``enabled`` is false or this torch build has no oneDNN."""
    if not enabled or _KERNEL is None:
        yield
        return
    use_onednn_layers(model)  # every call: layers added since (LoRA adapters) are turned too
    _state.open = getattr(_state, "open", 0) + 1
    try:
        yield
    finally:
        _state.open -= 1
