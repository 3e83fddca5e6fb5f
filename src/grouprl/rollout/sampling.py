"""The records of the generation seam: sampling parameters in, completions out, and the backend
protocol (``generate``, ``load_weights``), and the ids a completion stops at. Backends (``generation.py``'s hf, ``backends/``) build on these."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from grouprl.config import Config


def max_new_tokens_of(cfg: "Config") -> int:
    """The rollout's completion cap. The config leaves it empty for the task's default, which
    ``run_config.check_names`` fills in where the run is assembled."""
    cap = cfg.rollout.max_new_tokens
    if cap is None:
        raise ValueError(
            "rollout.max_new_tokens is unset: build the config with run_config.build_config, which "
            "fills in the task's default"
        )
    return cap


@dataclass
class SamplingParams:
    max_new_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    greedy: bool = False
    batch_size: int = 256
    # (sequences finished, sequences, tokens generated), called by the hf backend after each decode step
    # (a long evaluation's progress from inside one batched generation); other backends ignore it
    progress: Callable[[int, int, int], None] | None = field(default=None, compare=False, repr=False)
    # one seed per prompt: the decode loop's draws for that row come from its own keyed stream, whatever batch it
    # is in (rollout/keyed_draws.py; the agent endpoint sets them); None: torch's generator, in batch order
    seeds: list[int] | None = field(default=None, repr=False)

    def rows(self, start: int, stop: int) -> "SamplingParams":
        """These parameters for the prompts ``start:stop`` (their seeds)."""
        return self if self.seeds is None else replace(self, seeds=self.seeds[start:stop])

    @classmethod
    def for_rollout(cls, cfg: "Config", batch_size: int | None = None) -> "SamplingParams":
        """Training rollouts: the rollout section's sampling (``batch_size`` overrides the generate chunk)."""
        rollout = cfg.rollout
        return cls(
            max_new_tokens=max_new_tokens_of(cfg),
            temperature=rollout.temperature,
            top_p=rollout.top_p,
            top_k=rollout.top_k,
            batch_size=batch_size or rollout.generation_batch_size,
        )

    @classmethod
    def for_eval(cls, cfg: "Config", batch_size: int | None = None) -> "SamplingParams":
        """Held-out evaluation: greedy unless ``eval_greedy`` is off, with eval's own length cap."""
        rollout, evaluation = cfg.rollout, cfg.eval
        return cls(
            max_new_tokens=evaluation.eval_max_new_tokens or max_new_tokens_of(cfg),
            temperature=rollout.temperature,
            top_p=rollout.top_p,
            top_k=rollout.top_k,
            greedy=evaluation.eval_greedy,
            batch_size=batch_size or evaluation.eval_batch_size,
        )


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
    """The ids that end a completion: the tokenizer's eos, every eos of the model's generation config, and the
    chat template's end of turn. A chat template's end-of-turn token (``<|im_end|>``, ``<|eot_id|>``) may be in
    none of the first two (a tokenizer whose eos is ``<|endoftext|>``): stopping without it would run every
    turn on to max_new_tokens and train the model on what follows its own end of turn. A turn may end on any
    of them (the conversation runner treats each as the end of the turn)."""
    stops = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    end_of_turn = template_end_of_turn(tokenizer)
    for token in ([configured] if isinstance(configured, int) else list(configured or [])) + [end_of_turn]:
        if token is not None and token not in stops:
            stops.append(token)
    return stops


_PROBE = "grouprl-end-of-turn-probe"


def template_end_of_turn(tokenizer) -> int | None:
    """The id of the first special token the chat template writes after an assistant turn's content (its end
    of turn), or None (no template, or no special token there)."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": _PROBE}], tokenize=False
        )
    except Exception:  # noqa: BLE001 - a template that cannot render this has no end of turn to find here
        return None
    after = text[text.rfind(_PROBE) + len(_PROBE) :] if _PROBE in text else ""
    specials = [
        t
        for t in set(tokenizer.all_special_tokens) | set(getattr(tokenizer, "get_added_vocab", dict)())
        if t and t in after
    ]
    if not specials:
        return None
    first = min(specials, key=lambda t: (after.index(t), -len(t)))
    token_id = tokenizer.convert_tokens_to_ids(first)
    return token_id if isinstance(token_id, int) and token_id != tokenizer.unk_token_id else None
