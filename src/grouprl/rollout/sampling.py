"""The records of the generation seam: sampling parameters in, completions out, and the backend
protocol (``generate``, ``load_weights``). Backends (``generation.py``'s hf, ``backends/``) build on these."""

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


class GenerationBackend(Protocol):
    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt, in order."""

    def load_weights(self, model) -> None:
        """Take the trained weights (engines holding their own copy); a no-op for ``hf``."""
