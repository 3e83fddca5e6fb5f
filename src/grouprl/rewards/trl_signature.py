"""Reward functions written for TRL / open-r1 run unchanged: ``f(completions, **kwargs) -> list[float]``.

TRL calls a reward once per batch with ``prompts``, ``completions`` and every dataset column
(except the prompt) as a list keyword argument, one entry per completion; open-r1's rewards
read a column by name (``accuracy_reward(completions, solution, **kwargs)``). Completions are
conversational, as TRL passes them for chat prompts: ``[[{"role": "assistant", "content": ...}],
...]`` (open-r1 reads ``completion[0]["content"]``).

:func:`as_typed_reward` wraps such a function into a batch ``@reward_function``, so the scoring
pipeline treats it like any typed reward: ``None`` is TRL's "no opinion" (``is_score_valid``
false); anything that is not a finite number, or a list of the wrong length, is an error
(counted, never a score).
"""

from __future__ import annotations

import inspect
import logging
import math
from typing import Any, Callable

from grouprl.records import EvaluateResult
from grouprl.rewards.kit import reward_function

log = logging.getLogger(__name__)

# Keyword arguments grouprl's pipeline adds that are not dataset columns.
PIPELINE_KEYS = ("group_ids",)


def takes_trl_signature(fn: Callable) -> bool:
    """True for ``f(completions, ...)`` and ``f(prompts, completions, ...)`` (TRL's reward contract)."""
    if hasattr(fn, "reward_mode"):
        return False
    try:
        params = [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return False
    return bool(params) and (params[0] == "completions" or params[:2] == ["prompts", "completions"])


def _value(name: str, raw: Any) -> tuple[float | None, str | None]:
    if raw is None:
        return None, None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None, f"{name} returned {raw!r} ({type(raw).__name__}); expected a number or None"
    if not math.isfinite(raw):
        return None, f"{name} returned non-finite {raw!r}"
    return float(raw), None


def as_typed_reward(fn: Callable, name: str | None = None) -> Callable:
    """A batch ``@reward_function`` that calls the TRL-signature ``fn`` with the dataset columns."""
    rid = name or str(getattr(fn, "__name__", "trl_reward"))
    accepted = inspect.signature(fn).parameters
    takes_var_kw = any(p.kind is p.VAR_KEYWORD for p in accepted.values())

    def trl_batch(rollouts_messages, ground_truths=None, **columns):
        prompts, completions = [], []
        for messages in rollouts_messages:
            last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=len(messages))
            prompts.append([m.model_dump(exclude_none=True) for m in messages[:last]])
            completions.append([m.model_dump(exclude_none=True) for m in messages[last:]])
        kwargs = {k: v for k, v in columns.items() if k not in PIPELINE_KEYS}
        if ground_truths is not None and "ground_truth" not in kwargs and "ground_truth" in accepted:
            # the pipeline hands the rows' answers apart; a function that names the column gets it, as from TRL
            kwargs["ground_truth"] = list(ground_truths)
        if not takes_var_kw:  # a function without **kwargs gets only the columns it names
            kwargs = {k: v for k, v in kwargs.items() if k in accepted}
        if "prompts" in accepted or takes_var_kw:
            kwargs["prompts"] = prompts
        log.debug("reward %s (TRL signature) receives columns %s", rid, sorted(k for k in kwargs if k != "prompts"))
        values = fn(completions=completions, **kwargs)
        if not isinstance(values, (list, tuple)) or len(values) != len(completions):
            raise TypeError(
                f"reward '{rid}' returned {type(values).__name__} of length "
                f"{len(values) if hasattr(values, '__len__') else '?'}; expected a list of "
                f"{len(completions)} numbers (one per completion)"
            )
        results = []
        for raw in values:
            score, error = _value(rid, raw)
            results.append(
                EvaluateResult(
                    score=score or 0.0,
                    is_score_valid=score is not None and error is None,
                    error=error,
                    reason=None if score is not None or error else "no opinion",
                )
            )
        return results

    trl_batch.__name__ = rid
    trl_batch.__doc__ = fn.__doc__
    return reward_function(trl_batch, mode="batch", id=rid)
