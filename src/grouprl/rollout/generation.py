"""The generation seam: sampling parameters, completions, and the backends that produce them.

A backend turns a batch of token-id prompts into completions. ``hf`` (HF ``generate`` with the
KV cache, on the policy model itself) is the default; an engine that keeps its own copy of
the weights (vLLM) implements ``load_weights``, which the trainer calls after every update.
Backends are registered by name in :data:`BACKENDS` and chosen by ``generation_backend``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable

import torch

from grouprl.registry import Registry
from grouprl.rollout.decode import decode, generate_kwargs, sampling_warpers
from grouprl.rollout.prefill import left_pad, shared_prefill
from grouprl.rollout.sampling import Completion, GenerationBackend, SamplingParams, stop_token_ids
from grouprl.rollout.static_decode import can_capture, static_decode, supports_static
from grouprl.policy.cache_keyword import cache_keyword
from grouprl.speed.onednn_linear import onednn_linears

if TYPE_CHECKING:
    from grouprl.config import Config

__all__ = [
    "BACKENDS",
    "Completion",
    "GenerationBackend",
    "HFBackend",
    "SamplingParams",
    "generate",
    "make_backend",
    "stop_token_ids",
]


def generate(
    model,
    tokenizer,
    prompt_ids: list[list[int]],
    params: SamplingParams,
    device: torch.device,
    prefill_once: bool = True,
    turn_cache=None,
    record_logprobs: bool = False,
    onednn: bool = True,
    draw_with: str = "inverse_cdf",
    captured: bool = False,
) -> list[Completion]:
    """HF ``generate`` on left-padded chunks of ``params.batch_size`` prompts; with ``prefill_once``,
    consecutive identical prompts (a group's K copies) are prefilled once (``prefill.shared_prefill``); with a
    ``turn_cache`` (``rollout/turn_cache.py``), a prompt that extends an earlier call's prompt and
    completion prefills only its new tail (conversation turns). ``record_logprobs``: completions sampled by
    grouprl's decode loop carry their tokens' sampling log-probs (``Completion.logprobs``); the other paths
    (greedy, ``model.generate``, the turn cache) leave them None. ``onednn``: fp32 CPU linear layers through
    oneDNN while generating (``speed/onednn_linear.py``: 1.2-1.3x faster decoding here, same fp32 math).
    ``draw_with``: the decode loop's draw, ``inverse_cdf`` or ``multinomial`` (``rollout/decode.py``).
    ``captured``: the static-cache loop instead (``rollout/static_decode.py``: the same tokens, every row kept to
    the end, the step replayed as a CUDA graph on CUDA), where the model suits it."""
    # FSDP2 all-gathers parameters into buffers it reuses in the training forward: made under
    # inference_mode they would be inference tensors that the backward refuses. no_grad there.
    from torch.distributed.fsdp import FSDPModule

    no_grad = torch.no_grad() if isinstance(model, FSDPModule) else torch.inference_mode()
    chunks = -(-len(prompt_ids) // max(1, params.batch_size))
    with no_grad, onednn_linears(model, onednn, passes=params.max_new_tokens * max(1, chunks)):
        if turn_cache is not None and sampling_warpers(model, params) is not None:  # (on the decode loop)
            from grouprl.rollout.turn_cache import generate_with_turn_cache

            return generate_with_turn_cache(
                model, tokenizer, prompt_ids, params, device, turn_cache, prefill_once, record_logprobs, draw_with
            )
        return _generate(
            model, tokenizer, prompt_ids, params, device, prefill_once, record_logprobs, draw_with, captured
        )


def _generate(
    model,
    tokenizer,
    prompt_ids: list[list[int]],
    params: SamplingParams,
    device: torch.device,
    prefill_once: bool = True,
    record_logprobs: bool = False,
    draw_with: str = "inverse_cdf",
    captured: bool = False,
) -> list[Completion]:
    stops = stop_token_ids(tokenizer, model)
    pad = tokenizer.pad_token_id
    was_training = model.training
    model.eval()
    # grouprl's decode loop (rollout/decode.py: shared prefixes prefilled once, finished rows leave the batch,
    # progress per step) where it samples as generate would; prefill_once off keeps generate itself
    warpers = sampling_warpers(model, params) if prefill_once else None
    keep_logprobs = record_logprobs and warpers is not None and not params.greedy  # where the loop samples
    loop = decode
    if captured and supports_static(model) and params.seeds is None:  # the same tokens from a static cache
        loop = functools.partial(static_decode, capture=can_capture(model, device))
    out: list[Completion] = []
    for start in range(0, len(prompt_ids), params.batch_size):
        chunk = prompt_ids[start : start + params.batch_size]
        logprobs: list[list[float]] | None = [[] for _ in chunk] if keep_logprobs else None
        if warpers is not None:
            done, made = len(out), sum(len(c.ids) for c in out)  # the earlier chunks' rows and tokens
            report = (
                None
                if params.progress is None
                else (
                    lambda finished, _, tokens, base=params.progress, done=done, made=made: base(
                        done + finished, len(prompt_ids), made + tokens
                    )
                )
            )
            part = params.rows(start, start + len(chunk))  # (each prompt's seed, where given)
            new_rows = loop(model, chunk, part, warpers, stops, pad, device, report, logprobs, draw_with)
        else:
            new_rows = _hf_generate(model, chunk, params, stops, pad, device, prefill_once)
        rows, cut = [], []
        for row in new_rows:
            end = next((j for j, token in enumerate(row) if token in stops), None)
            # a row without a stop ran to max_new_tokens and holds no padding: every token is the model's
            # (dropping pad ids would drop real tokens where pad is an ordinary token, e.g. <|endoftext|>)
            rows.append(row if end is None else row[: end + 1])
            cut.append(end is None)
        texts = tokenizer.batch_decode(rows, skip_special_tokens=True)
        scores = [None] * len(rows) if logprobs is None else [lp[: len(r)] for lp, r in zip(logprobs, rows)]
        out.extend(Completion(r, t, c, lp) for r, t, c, lp in zip(rows, texts, cut, scores))
    if was_training:
        model.train()
    return out


def _hf_generate(
    model,
    chunk: list[list[int]],
    params: SamplingParams,
    stops: list[int],
    pad: int,
    device: torch.device,
    prefill_once: bool,
) -> list[list[int]]:
    """HF ``generate`` on a left-padded chunk (the reference path; a group's prompt prefilled once with
    ``prefill_once``): each row's new tokens, padding after a stop included."""
    kwargs = dict(
        max_new_tokens=params.max_new_tokens,
        eos_token_id=stops,
        pad_token_id=pad,
        use_cache=True,
        **generate_kwargs(params),
    )
    shared = shared_prefill(model, chunk, pad, device) if prefill_once else None
    if shared is not None:
        ids, mask, kwargs[cache_keyword(model)] = shared
    else:
        ids, mask = left_pad(chunk, pad)
    width = ids.shape[1]
    seqs = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
    return seqs[:, width:].tolist()


class HFBackend:
    """HF ``generate`` on the policy model itself: the weights are always the trained ones.
    ``turn_cache``: a ``rollout.turn_cache.TurnCache`` to keep each conversation's KV cache between turns.
    ``record_logprobs``: sampled completions carry their behaviour log-probs where the decode loop drew them
    (the asynchronous producer's copy; off for the learner's own backend, whose samples need no correction).
    ``onednn``: CPU fp32 linear layers through oneDNN while generating (``speed.onednn_generation``).
    ``draw_with``: the decode loop's draw (``speed.sampling_draw``: ``inverse_cdf`` or ``multinomial``).
    ``captured``: the static-cache decode loop, captured as a CUDA graph on CUDA (``speed.captured_decode``)."""

    def __init__(
        self,
        model,
        tokenizer,
        device,
        prefill_once: bool = True,
        turn_cache=None,
        record_logprobs: bool = False,
        onednn: bool = True,
        draw_with: str = "inverse_cdf",
        captured: bool = False,
    ):
        self.model, self.tokenizer, self.device, self.prefill_once = model, tokenizer, device, prefill_once
        self.turn_cache, self.record_logprobs, self.onednn = turn_cache, record_logprobs, onednn
        self.draw_with, self.captured = draw_with, captured

    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        return generate(
            self.model,
            self.tokenizer,
            prompt_ids,
            params,
            self.device,
            self.prefill_once,
            self.turn_cache,
            self.record_logprobs,
            self.onednn,
            self.draw_with,
            self.captured,
        )

    def load_weights(self, model) -> None:
        self.model = model  # the same object: nothing to copy


BackendFactory = Callable[[Any, "Config"], GenerationBackend]  # (policy, cfg) -> backend


def _vllm_backend(policy, cfg: "Config") -> GenerationBackend:
    from grouprl.rollout.backends.vllm import build_vllm_backend  # vLLM imported only when chosen

    return build_vllm_backend(policy, cfg)


def _vllm_server_backend(policy, cfg: "Config") -> GenerationBackend:
    from grouprl.rollout.backends.vllm_client import build_vllm_server_backend

    return build_vllm_server_backend(policy, cfg)


def _hf_backend(policy, cfg: "Config") -> GenerationBackend:
    turn_cache = None
    if cfg.speed.turn_kv_cache and cfg.tools.episode_mode == "conversation":
        from grouprl.rollout.turn_cache import TurnCache

        turn_cache = TurnCache()
    return HFBackend(
        policy.model,
        policy.tokenizer,
        policy.device,
        cfg.speed.prefill_once,
        turn_cache,
        onednn=cfg.speed.onednn_generation,
        draw_with=cfg.speed.sampling_draw,
        captured=captured_decode(cfg.speed.captured_decode, torch.device(policy.device)),
    )


def captured_decode(mode: str, device: torch.device) -> bool:
    """``speed.captured_decode``: ``on``, ``off``, or ``auto`` = on for a policy on CUDA (where the decode loop is
    bound by kernel launches), off elsewhere (on a CPU the graph does not apply and ``decode`` drops finished rows)."""
    return mode == "on" or (mode == "auto" and device.type == "cuda")


# A factory (policy, cfg) -> backend: built-ins import their engine inside it; a user's is named
# 'path/to/file.py:make_backend' or 'package.module:make_backend'.
BACKENDS: Registry[BackendFactory] = Registry(
    "generation backend", config_key="generation_backend", code_form="make_backend"
)
BACKENDS.update(
    hf=_hf_backend,
    vllm=_vllm_backend,  # pip install grouprl[vllm]; rollout/backends/vllm.py
    vllm_server=_vllm_server_backend,  # a `grouprl vllm-serve` process; rollout/backends/vllm_client.py
)


def make_backend(policy, cfg: "Config") -> GenerationBackend:
    """The backend ``generation_backend`` names, built for ``policy``."""
    try:
        factory = BACKENDS.resolve(cfg.rollout.generation_backend)
    except KeyError as err:  # an unknown name, or a user's file or module that fails to import
        from grouprl.config import ConfigError

        raise ConfigError(f"config key 'generation_backend': {err.args[0] if err.args else err}") from None
    return factory(policy, cfg)


def release_backend(backend: GenerationBackend) -> None:
    """Free what a backend holds as soon as the run is done with it (``close`` where it has one: vLLM's engine,
    whose release must not be left to the garbage collector; see ``VLLMBackend.close``)."""
    close = getattr(backend, "close", None)
    if callable(close):
        close()
