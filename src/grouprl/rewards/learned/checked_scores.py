"""A learned reward's scores under the contract of a plain reward's.

A learned reward (``protocol.py``) returns one score per episode. As for a reward function:

- a NaN or infinite score is an error of that episode (counted in ``reward_errors`` and against
  ``max_reward_error_fraction``), never a score: the episode's learned part is left out (0), so the
  score, the advantages and the mixer's step stay finite (a NaN used to skip the whole update and
  write NaN, which is not JSON, into the metrics);
- ``None`` is no opinion (left out, no error);
- an exception, or no answer within ``reward_timeout`` seconds (one budget for the batch call, as a
  batch reward has), is an error of every episode of the batch; a ``RewardFailure`` the reward raises
  itself (its own error budget spent, as ``distilled_judge``'s judge) still stops the run;
- a wrong count or a value that is not a number is its author's bug: one line, :class:`LearnedRewardError`.

The learned reward's own ``update`` runs unbounded (it trains a model, which may take longer than a
reward call).
"""

from __future__ import annotations

from typing import Any

from grouprl.config import ConfigError
from grouprl.rewards.guard import RewardFailure, RewardTimeout, call_with_timeout, finite_score


class LearnedRewardError(ConfigError):
    """A learned reward returned the wrong number of scores, or something that is not a number."""


def _as_list(name: str, values: Any, expected: int) -> list[Any]:
    if hasattr(values, "tolist") and not isinstance(values, (list, tuple)):
        values = values.tolist()  # a tensor or an array
    if not isinstance(values, (list, tuple)):
        raise LearnedRewardError(
            f"learned reward '{name}': score() returned {type(values).__name__}; expected a list of "
            f"{expected} floats (one per episode)"
        )
    if len(values) != expected:
        raise LearnedRewardError(
            f"learned reward '{name}': score() returned {len(values)} scores for {expected} episodes; "
            "expected one per episode"
        )
    return list(values)


def checked_scores(reward, episodes: list, timeout: float) -> tuple[list[float | None], list[str | None]]:
    """``reward.score(episodes)`` as (score or None, error or None) per episode."""
    name = reward.name
    try:
        values = call_with_timeout(reward.score, timeout, episodes, name=f"learned reward '{name}'")
    except RewardTimeout as err:
        return [None] * len(episodes), [f"{name}: {err}"] * len(episodes)
    except RewardFailure:  # the reward's own verdict that the run must stop (e.g. its judge's error budget)
        raise
    except Exception as err:  # noqa: BLE001 - the batch call failed: an error of each of its episodes
        return [None] * len(episodes), [f"{name}: {type(err).__name__}: {err}"] * len(episodes)
    scores: list[float | None] = []
    errors: list[str | None] = []
    for i, value in enumerate(_as_list(name, values, len(episodes))):
        if value is not None and (isinstance(value, (bool, str, bytes)) or not hasattr(value, "__float__")):
            raise LearnedRewardError(
                f"learned reward '{name}': score() returned {type(value).__name__} {value!r:.60} for episode "
                f"{i}; expected a float or None"
            )
        score, error = finite_score(name, value)
        scores.append(score)
        errors.append(error)
    return scores, errors
