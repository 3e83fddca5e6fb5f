"""The records of the generation seam: sampling parameters in, completions out, and the backend
protocol (``generate``, ``load_weights``), and the ids a completion stops at. Backends (``generation.py``'s hf, ``backends/``) build on these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from grouprl.config import Config


@dataclass
class SamplingParams:
    max_new_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    greedy: bool = False
    batch_size: int = 256

    @classmethod
    def for_rollout(cls, cfg: "Config", batch_size: int | None = None) -> "SamplingParams":
        """Training rollouts: the rollout section's sampling (``batch_size`` overrides the generate chunk)."""
        rollout = cfg.rollout
        return cls(max_new_tokens=rollout.max_new_tokens, temperature=rollout.temperature, top_p=rollout.top_p,
                   top_k=rollout.top_k, batch_size=batch_size or rollout.generation_batch_size)

    @classmethod
    def for_eval(cls, cfg: "Config", batch_size: int | None = None) -> "SamplingParams":
        """Held-out evaluation: greedy unless ``eval_greedy`` is off, with eval's own length cap."""
        rollout, evaluation = cfg.rollout, cfg.eval
        return cls(max_new_tokens=evaluation.eval_max_new_tokens or rollout.max_new_tokens,
                   temperature=rollout.temperature, top_p=rollout.top_p, top_k=rollout.top_k,
                   greedy=evaluation.eval_greedy, batch_size=batch_size or evaluation.eval_batch_size)


@dataclass
class Completion:
    ids: list[int]  # up to and including the first eos
    text: str
    truncated: bool  # no eos within max_new_tokens
    logprobs: list[float] | None = None  # per token of ``ids``, from the engine (None: not computed)
    policy_version: int | None = None  # the weights' version that sampled it (asynchronous rollouts)


class GenerationBackend(Protocol):
    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt, in order."""

    def load_weights(self, model) -> None:
        """Take the trained weights (engines holding their own copy); a no-op for ``hf``."""


def stop_token_ids(tokenizer, model=None) -> list[int]:
    """The ids that end a completion: the tokenizer's eos, then every eos of the model's generation config.
    A chat template's end-of-turn token (``<|im_end|>``, ``<|eot_id|>``) may be only in the latter (a
    tokenizer whose eos is ``<|endoftext|>``): stopping on the tokenizer's alone would run every turn on
    to max_new_tokens and train the model on what follows its own end of turn."""
    stops = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for token in [configured] if isinstance(configured, int) else list(configured or []):
        if token not in stops:
            stops.append(token)
    return stops
