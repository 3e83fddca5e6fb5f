"""Load a causal LM and its tokenizer from a hub id or a local dir, on the right device."""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from grouprl.tokenizer_loading import auto_tokenizer  # noqa: F401 - the policy's loader, re-exported
from grouprl.config import ModelConfig
from grouprl.speed.cuda_attention import choose_cudnn_attention

log = logging.getLogger(__name__)


def pick_device(requested: str = "auto") -> torch.device:
    """auto: CUDA, else Apple MPS (with CPU fallback for missing ops), else CPU."""
    if requested != "auto":
        return torch.device(requested)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        os.environ.setdefault("PYTORCH_ENABLE_MPS_FALLBACK", "1")
        return torch.device("mps")
    return torch.device("cpu")


def pick_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, name)


@dataclass
class Policy:
    model: PreTrainedModel  # trainable (a PeftModel when LoRA is on)
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    reference: PreTrainedModel | None = None  # frozen copy for KL; None with LoRA (adapters off) or beta=0

    def reference_context(self):
        """Context in which ``reference_model()`` gives reference log-probs."""
        import contextlib

        if self.reference is None and hasattr(self.model, "disable_adapter"):
            return self.model.disable_adapter()
        return contextlib.nullcontext()

    def reference_model(self) -> PreTrainedModel:
        return self.reference if self.reference is not None else self.model


def load_tokenizer(path: str, revision: str | None = None) -> PreTrainedTokenizerBase:
    tok = auto_tokenizer(path, revision)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"  # generation pads on the left
    return tok


@contextlib.contextmanager
def peft_quietly() -> Iterator[None]:
    """peft reads ``model.is_gradient_checkpointing``, which transformers >= 5.24 deprecates with a
    FutureWarning: peft's call, not ours, so exactly that message is silenced while peft wraps a model."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def own_trainable_memory(model) -> int:
    """Copy the trainable CPU parameters out of the checkpoint's memory map; the number copied.

    ``from_pretrained`` maps a safetensors file and, where the dtype matches, its tensors stay views of
    that private map: the first optimizer step then writes every weight through a copy-on-write fault,
    one 4 KiB page at a time (SmolLM2's first AdamW step: 1.2-1.5 s against 0.05 s for the next; with the
    weights copied here, 0.2 s for the copy and 0.3 s for that step). Frozen weights (LoRA's base, the
    reference) are never written and stay mapped, sharing the page cache."""
    copied = 0
    with torch.no_grad():
        for param in model.parameters():  # a tied weight is one Parameter: copied once, still tied
            if param.requires_grad and param.device.type == "cpu":
                param.data = param.data.clone()
                copied += 1
    return copied


def load_policy(
    cfg: ModelConfig,
    path: str,
    device: torch.device,
    need_reference: bool,
    reference_path: str | None = None,
    revision: str | None = None,
    attn_implementation: str | None = None,
) -> Policy:
    """The trainable model at ``path`` (a LoRA checkpoint dir resumes its adapters), and, when a KL
    term needs one, the frozen reference from ``reference_path`` (default ``path``). ``revision``
    (a hub branch, tag or commit) and ``attn_implementation`` go to ``from_pretrained``."""
    dtype = pick_dtype(cfg.torch_dtype, device)
    choose_cudnn_attention(device, cfg.cudnn_attention)  # process-wide, before any forward (speed/cuda_attention.py)
    tokenizer = load_tokenizer(path, revision)
    extra = {k: v for k, v in (("revision", revision), ("attn_implementation", attn_implementation)) if v}
    if (Path(path) / "adapter_config.json").is_file():
        from peft import AutoPeftModelForCausalLM

        with peft_quietly():
            model = AutoPeftModelForCausalLM.from_pretrained(path, is_trainable=True, dtype=dtype).to(device)
    else:
        # transformers wraps PreTrainedModel.to with functools.wraps, which mypy reads as an unbound call
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **extra).to(device)  # type: ignore[arg-type]
        if cfg.use_peft:
            from peft import LoraConfig, get_peft_model

            lora = LoraConfig(
                r=cfg.lora_r,
                lora_alpha=cfg.lora_alpha,
                lora_dropout=cfg.lora_dropout,
                target_modules=cfg.lora_target_modules,
                task_type="CAUSAL_LM",
            )
            with peft_quietly():
                model = get_peft_model(model, lora)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    own_trainable_memory(model)
    reference = None
    if need_reference and not hasattr(model, "disable_adapter"):  # with LoRA: the base, adapters off
        reference = AutoModelForCausalLM.from_pretrained(reference_path or path, dtype=dtype, **extra)
        reference = reference.to(device).eval()  # type: ignore[arg-type]  # the same wrapped .to
        reference.requires_grad_(False)
    log.info("loaded %s on %s (%s)", path, device, dtype)
    return Policy(model=model, tokenizer=tokenizer, device=device, reference=reference)
