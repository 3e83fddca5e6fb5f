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
# After this many calls of a layer inside one generation block, its weight is repacked into oneDNN's blocked
# layout (bit-identical products from 2 rows up). The break-even measured on 2 quiet cores: a repack costs what
# 8-10 decode passes gain from it (SmolLM2 and Qwen2.5-0.5B, 8 and 16 rows: passes 1.5-1.9x faster; the figures
# in docs/performance.md, "oneDNN's packed weights").
PACK_AFTER_CALLS = 10
PACK_AFTER_CALLS_ONE_ROW = 35  # one row (an agent's lone call): SmolLM2's pass 27.3 -> 24.1 ms, break-even 34 passes

_state = threading.local()  # per thread: how many onednn_linears blocks are open


def _find_kernel():
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):  # a build without the op
        return None


_KERNEL = _find_kernel()
_reorder = getattr(torch.ops.mkldnn, "_reorder_linear_weight", None) if _KERNEL is not None else None
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
            return _KERNEL(input, _weight_for_this_call(self, weight, input), self.bias, "none", [], "")
        return F.linear(input, weight, self.bias)


def _weight_for_this_call(layer: nn.Linear, weight: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    """The plain weight for a block's first ``PACK_AFTER_CALLS`` calls of ``layer``, then oneDNN's packed copy of it.

    Ski rental: a generation's length is not known until it ends, so the repack (the price of buying) is paid
    once the calls already made would have paid for it, and only where the block's cap on passes leaves as many
    again to come; a generation that stops early never pays, a long one loses at most one repack's worth. The copy
    is dropped when the outermost block closes: the weights change with the next update, and the update's own peak
    memory is not raised by it."""
    key = id(layer)
    calls = _state.calls[key] = _state.calls.get(key, 0) + 1
    passes, rows = _state.passes, max(1, input.numel() // input.size(-1))
    after = PACK_AFTER_CALLS if rows > 1 or key in _state.packed else PACK_AFTER_CALLS_ONE_ROW
    if calls <= after or _reorder is None or (passes is not None and passes - calls < after):
        return weight
    stamp = (weight.data_ptr(), weight._version)
    held = _state.packed.get(key)
    if held is None or held[0] != stamp:  # a weight changed inside the block (a push into this copy): pack it again
        held = _state.packed[key] = (stamp, _reorder(weight, rows))
    return held[1]


def use_onednn_layers(model: nn.Module) -> None:
    """Turn every plain ``nn.Linear`` of ``model`` into a :class:`OneDNNLinear` (its class only: parameters,
    hooks and state dict stay). Subclasses (LoRA wrappers, quantized layers) are left as they are; the plain
    linears inside them are turned."""
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = OneDNNLinear


@contextmanager
def onednn_linears(model: nn.Module, enabled: bool = True, passes: int | None = None) -> Iterator[None]:
    """Inside the block, this thread's no-grad forwards of ``model``'s fp32 CPU linear layers run through
    oneDNN. A no-op where ``enabled`` is false or this torch build has no oneDNN. ``passes``: the most forward
    passes the block can make (a generation's token cap), when known: a layer is not repacked where the passes
    left could not pay for it."""
    if not enabled or _KERNEL is None:
        yield
        return
    use_onednn_layers(model)  # every call: layers added since (LoRA adapters) are turned too
    _state.open = getattr(_state, "open", 0) + 1
    if _state.open == 1:
        _state.calls, _state.packed, _state.passes = {}, {}, passes
    try:
        yield
    finally:
        _state.open -= 1
        if _state.open == 0:
            _state.calls, _state.packed = {}, {}
