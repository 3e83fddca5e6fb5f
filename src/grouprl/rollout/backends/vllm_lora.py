"""Adapter-only weight sync for LoRA policies on vLLM (``vllm_weight_sync``), colocated and server.

A merged push sends every weight of the model after each update (``vllm.checkpoint_weights``: each adapted
layer as W + s·B·A). A peft LoRA policy trains only its adapter (B and A; the base is frozen), so an
adapter push sends only those: the engine is built with ``enable_lora`` and a ``max_lora_rank`` that fits,
gets the policy's base weights once at start (a warm start may differ from the files), then, per push, the
adapter as a peft adapter directory (``adapter_model.safetensors`` + ``adapter_config.json``) that vLLM
loads with ``LoRARequest(name, id, path)``. Every push is a new id: vLLM caches adapters by id and would
otherwise serve the old one. The engine then samples every request under the newest adapter. The directory
of the adapter being served is kept until the next push replaces it (vLLM may re-read it).

vLLM 0.32 loads adapters from a path only (``LoRAModel.from_local_checkpoint``; an in-memory loader would
need its worker internals), so the directory sits in /dev/shm where there is one: a memory copy.

``auto`` uses the adapter where the engine runs on a GPU and this module finds nothing vLLM cannot serve
exactly, else merged pushes with a logged reason; ``adapter`` refuses such a policy in one line (and takes
the adapter on CPU too). Why not on CPU: vLLM's CPU LoRA kernels are torch ops that gather the adapter's
weights once per token (``vllm/lora/ops/torch_ops``); on SmolLM2-135M an engine serving the adapter
generated 2.0-2.3x slower than one serving merged weights, which costs far more than the push saves
(``CPU_SLOWDOWN``, docs/vllm.md). What is refused (``adapter_problem``): no peft LoRA, several adapters,
``modules_to_save`` (full trained copies), DoRA, LoRA bias, a LoRA on a layer other than a linear one
(embeddings), trained parameters outside the adapter, a rank above vLLM's 512. What vLLM itself refuses at
the first load (a target module the architecture cannot adapt, e.g. lm_head) falls back the same way
(``auto``) or stops the run (``adapter``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import weakref
from typing import Any

import torch

log = logging.getLogger(__name__)

ENGINE_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's allowed max_lora_rank values
CPU_SLOWDOWN = "2x"  # bench/levers/lora_sync.py on SmolLM2-135M: 2.0-2.3x (docs/vllm.md)
ON_CPU = (
    f"the engine runs on CPU, where vLLM's LoRA kernels generate ~{CPU_SLOWDOWN} slower than merged weights "
    "(docs/vllm.md); vllm_weight_sync: adapter takes the adapter anyway"
)


class AdapterRefused(ValueError):
    """The engine refused the adapter (its one-line reason)."""


def engine_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that serves adapters of rank ``rank``."""
    for allowed in ENGINE_RANKS:
        if allowed >= rank:
            return allowed
    raise AdapterRefused(f"LoRA rank {rank} is above vLLM's largest max_lora_rank {ENGINE_RANKS[-1]}")


def _lora_config(model) -> Any:
    """The model's one active peft config, or a one-line reason it has none vLLM could load."""
    if not hasattr(model, "peft_config"):
        return "the policy is not a peft LoRA model (use_peft: false)"
    if len(model.peft_config) != 1:
        return f"the policy has {len(model.peft_config)} peft adapters; one is synced"
    config = next(iter(model.peft_config.values()))
    if str(getattr(config.peft_type, "value", config.peft_type)) != "LORA":
        return f"the peft adapter is {config.peft_type}, not LoRA"
    return config


def adapter_problem(model) -> str | None:
    """Why ``model``'s weights cannot be synced as a vLLM adapter (one line), or None when they can."""
    from peft.tuners.lora import Linear, LoraLayer

    config = _lora_config(model)
    if isinstance(config, str):
        return config
    unsupported = [
        ("modules_to_save", f"modules_to_save {config.modules_to_save} (full trained copies)"),
        ("use_dora", "DoRA (use_dora)"),
        ("lora_bias", "a LoRA bias (lora_bias)"),
    ]
    for field, what in unsupported:
        if getattr(config, field, None):
            return f"the adapter has {what}, which vLLM does not load as an adapter"
    if getattr(config, "bias", "none") != "none":
        return f"the adapter trains biases (bias: {config.bias}), which vLLM does not load"
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and not isinstance(module, Linear):
            return f"LoRA on {name} ({type(module).__name__}): vLLM loads LoRA on linear layers only"
    for name, parameter in model.named_parameters():
        if parameter.requires_grad and ".lora_A." not in name and ".lora_B." not in name:
            return f"{name} is trained outside the adapter: an adapter push would not carry it"
    if adapter_rank(model) > ENGINE_RANKS[-1]:
        return f"LoRA rank {adapter_rank(model)} is above vLLM's largest max_lora_rank {ENGINE_RANKS[-1]}"
    return None


def adapter_rank(model) -> int:
    """The largest LoRA rank in ``model``'s adapter (``r`` and any ``rank_pattern`` entry)."""
    config = next(iter(model.peft_config.values()))
    return max([config.r, *(config.rank_pattern or {}).values()])


def choose_adapter_rank(mode: str, model, on_gpu: bool, engine_limit: int | None = None) -> int:
    """``vllm_weight_sync`` applied to ``model``: the engine's ``max_lora_rank`` for adapter pushes, 0 for merged
    pushes. ``on_gpu``: where the engine runs; ``engine_limit``: the most a running engine (a server) serves
    (0: no LoRA), None: built to fit. ``adapter`` raises ConfigError (one line) where ``auto`` logs why it
    pushes merged weights."""
    if mode == "merged":
        return 0
    problem = adapter_problem(model)
    if problem is None and mode == "auto" and not on_gpu:
        problem = ON_CPU
    if problem is None and engine_limit is not None and adapter_rank(model) > engine_limit:
        problem = (
            f"the vLLM server serves LoRA up to rank {engine_limit}, the adapter's is {adapter_rank(model)} "
            f"(start it with --max_lora_rank {engine_rank(adapter_rank(model))})"
        )
    if problem is None:
        return engine_rank(adapter_rank(model))
    refuse_or_fall_back(mode, problem, quiet=not hasattr(model, "peft_config"))
    return 0


def refuse_or_fall_back(mode: str, problem: str, quiet: bool = False) -> None:
    """``adapter``: ConfigError; ``auto``: a logged reason (merged pushes follow)."""
    if mode == "adapter":
        from grouprl.config import ConfigError

        raise ConfigError(f"vllm_weight_sync: adapter: {problem}; use vllm_weight_sync: merged (or auto)")
    if not quiet:
        log.info("vllm_weight_sync auto: pushing merged weights, not the adapter: %s", problem)


def adapter_tensors(model) -> list[tuple[str, torch.Tensor]]:
    """The adapter's tensors (views of the live lora_A/lora_B weights) under peft's saved names, which vLLM
    reads (``base_model.model.<module>.lora_A.weight``)."""
    adapter = next(iter(model.peft_config))
    return [
        (name.replace(f".{adapter}.", "."), t.detach())
        for name, t in model.state_dict().items()
        if ".lora_A." in name or ".lora_B." in name
    ]


def adapter_config(model) -> dict:
    """The adapter's ``adapter_config.json`` as vLLM reads it. ``init_lora_weights`` says true: an init that
    rewrites the base (PiSSA, OLoRA) has done so in the trainer, and the engine got that base at start."""
    config = next(iter(model.peft_config.values())).to_dict()
    config = {k: sorted(v) if isinstance(v, set) else v for k, v in config.items()}
    config["init_lora_weights"] = True
    return json.loads(json.dumps(config, default=str))


def write_adapter(tensors: list[tuple[str, torch.Tensor]], config: dict, parent: str) -> str:
    """A peft adapter directory in ``parent`` (written under a temporary name, then renamed: never read half
    written); returns its path."""
    from safetensors.torch import save_file

    partial = tempfile.mkdtemp(prefix="adapter-", suffix=".partial", dir=parent)
    try:
        save_file(
            {name: t.to("cpu").contiguous() for name, t in tensors}, os.path.join(partial, "adapter_model.safetensors")
        )
        with open(os.path.join(partial, "adapter_config.json"), "w") as f:
            json.dump(config, f)
        path = partial.removesuffix(".partial")
        os.rename(partial, path)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return path


def fresh_dir() -> str:
    """A new directory in shared memory (/dev/shm, where there is one: no disk write), else in the temp dir."""
    return tempfile.mkdtemp(prefix="grouprl-adapter-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)


class AdapterFiles:
    """The adapter directories of one trainer: each push writes a new one; the one in use is kept until the
    next push is loaded, then removed. ``parent``: a directory the engine sees (default: a fresh one)."""

    def __init__(self, config: dict, parent: str | None = None) -> None:
        self.config = config
        self.parent = parent or fresh_dir()
        self.current: str | None = None
        if parent is None:
            weakref.finalize(self, shutil.rmtree, self.parent, ignore_errors=True)

    def push(self, tensors: list[tuple[str, torch.Tensor]], load) -> Any:
        """Write the adapter, ``load(path)`` it (the engine's load, or a request to the server), then drop the
        previous directory; a failed load drops the new one instead. Returns what ``load`` returned."""
        path = write_adapter(tensors, self.config, self.parent)
        try:
            answer = load(path)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        self.close()
        self.current = path
        return answer

    def close(self) -> None:
        if self.current is not None:
            shutil.rmtree(self.current, ignore_errors=True)
            self.current = None


class AdapterSlot:
    """The adapter a ``vllm.LLM`` serves: each load is a new ``LoRARequest`` id, loaded at once (so a refusal
    shows at the push, and the push's time is the load's), the previous one removed."""

    def __init__(self, llm) -> None:
        self.llm = llm
        self.request: Any = None  # the LoRARequest every generate call passes; None: the base weights alone
        self.loads = 0

    def load(self, path: str) -> None:
        """Serve the adapter directory ``path`` from now on. AdapterRefused: vLLM's reason (the previous adapter
        is still served)."""
        from vllm.lora.request import LoRARequest

        self.loads += 1
        request = LoRARequest(f"grouprl-{self.loads}", self.loads, path)
        try:
            self.llm.llm_engine.add_lora(request)
        except (ValueError, RuntimeError, OSError) as err:
            raise AdapterRefused(" ".join(f"vLLM refused the adapter: {err}".split())[:500]) from err
        if self.request is not None:
            self.llm.llm_engine.remove_lora(self.request.lora_int_id)
        self.request = request

    def forget(self) -> None:
        """After a full-weights load: vLLM drops its adapters then (and merged weights hold the delta)."""
        self.request = None
