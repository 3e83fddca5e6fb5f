"""Which of torch's attention kernels a policy on a CUDA device may use: cuDNN's or not (``model.cudnn_attention``).

Why: where a call passes an attention mask, torch's ``scaled_dot_product_attention`` on a recent NVIDIA GPU
(torch 2.11, H100) prefers cuDNN's fused attention, and cuDNN builds an execution plan for each new shape
(batch, query length, key length) it meets: on the order of a millisecond of host time per new shape and
layer, against ~5 us for the kernel itself at decode sizes. An RL step meets new shapes all the time: each
decode step's keys are one token longer, a finished row leaves grouprl's decode batch, every batch of
prompts and completions has its own lengths. On an H100 the profile of one tiny-model generation (128 rows x
8 tokens, sampled) had 48 % of its host time in ``_cudnn_attention_forward`` (~1 ms a call, 4 us of GPU time);
grouprl's decode loop took a median 263 ms in one run and 521 ms in another where HF ``generate`` on the same
rows took 55-64 ms, and 75 ms with cuDNN off (docs/performance.md, "cuDNN attention on CUDA"). Without cuDNN,
torch runs its memory-efficient kernel where a mask is passed (flash where none is), neither of which plans.

The switch is torch's own, process-wide (``torch.backends.cuda.enable_cudnn_sdp``): it is set once, where a policy
is loaded onto a CUDA device, so every thread of the process (an asynchronous producer, the learner) sees the
same setting; a context manager around generation alone would race between those threads.
"""

from __future__ import annotations

import torch


def choose_cudnn_attention(device: torch.device, enabled: bool) -> None:
    """On a CUDA ``device``, allow or forbid cuDNN's kernel in ``scaled_dot_product_attention``; elsewhere nothing."""
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(enabled)
