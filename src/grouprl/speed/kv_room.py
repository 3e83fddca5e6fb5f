"""Room in the decode loop's KV cache: each step writes its keys and values in place instead of copying the cache.

Why: transformers' ``DynamicLayer`` appends a step's keys and values with ``torch.cat``, a copy of the whole layer,
every step, in every layer. With long contexts the copy is a large share of a step: the agent main job's held-out
evaluation (50 conversations of up to ~1,400 SmolLM2-135M tokens, 30 layers, fp32) spent 15 % of its generation
time in that ``cat`` (py-spy, 2 cores; docs/performance.md, "Room in the KV cache"). Here, once the prompt is in the cache, each layer
moves into one buffer with room for ``max_new_tokens`` more positions; a step writes one column, and attention reads
a view of the filled part. The keys and values are the same numbers at the same positions, so the logits are too.

``reserve`` changes only plain ``DynamicLayer`` layers (not sliding-window, quantized or static ones). A layer
that would run out of room, or is cropped, repeated or reset, turns back into a plain ``DynamicLayer`` first.
"""

from __future__ import annotations

import torch

try:  # transformers >= 4.56: caches are lists of layers
    from transformers.cache_utils import DynamicLayer
except ImportError:  # pragma: no cover - an older transformers: nothing to change
    DynamicLayer = None  # type: ignore[assignment,misc]


def reserve(cache, extra: int) -> int:
    """Give every plain layer of ``cache`` room for ``extra`` more positions; how many layers took it."""
    if DynamicLayer is None or extra <= 0:
        return 0
    taken = 0
    for layer in getattr(cache, "layers", ()):
        if type(layer) is not DynamicLayer or not layer.is_initialized or layer.keys.dim() != 4:
            continue
        rows, heads, length, dim = layer.keys.shape
        keys = layer.keys.new_empty((rows, heads, length + extra, dim))
        values = layer.values.new_empty((rows, heads, length + extra, layer.values.shape[-1]))
        keys[:, :, :length] = layer.keys
        values[:, :, :length] = layer.values
        layer.__class__ = RoomyLayer
        layer.room_keys, layer.room_values, layer.used = keys, values, length
        layer._view()
        taken += 1
    return taken


if DynamicLayer is not None:

    class RoomyLayer(DynamicLayer):
        """A ``DynamicLayer`` whose keys and values are views of buffers with room to grow (``reserve``)."""

        room_keys: torch.Tensor
        room_values: torch.Tensor
        used: int

        def _view(self) -> None:
            self.keys = self.room_keys[:, :, : self.used]
            self.values = self.room_values[:, :, : self.used]

        def _plain(self) -> None:
            """Back to a plain ``DynamicLayer`` holding the filled part (a copy: the buffers go)."""
            self.keys, self.values = self.keys.contiguous(), self.values.contiguous()
            del self.room_keys, self.room_values, self.used
            self.__class__ = DynamicLayer

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            new = key_states.shape[-2]
            if self.used + new > self.room_keys.shape[-2]:  # out of room: grow as transformers does from here
                self._plain()
                return DynamicLayer.update(self, key_states, value_states, *args, **kwargs)
            self.room_keys[:, :, self.used : self.used + new] = key_states
            self.room_values[:, :, self.used : self.used + new] = value_states
            self.used += new
            self._view()
            return self.keys, self.values

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            self.room_keys, self.room_values = self.room_keys[indices], self.room_values[indices]
            self._view()

        def crop(self, tokens_to_remove: int) -> None:
            self._plain()
            DynamicLayer.crop(self, tokens_to_remove)

        def batch_repeat_interleave(self, repeats: int) -> None:
            self._plain()
            DynamicLayer.batch_repeat_interleave(self, repeats)

        def reset(self) -> None:  # the contents go: no copy of them first
            del self.room_keys, self.room_values, self.used
            self.__class__ = DynamicLayer
            DynamicLayer.reset(self)
