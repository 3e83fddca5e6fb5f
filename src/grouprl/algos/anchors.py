"""Anchor groups for GiGPO: steps of one episode group that stand in the same environment state.

GiGPO (Feng et al., 2025, "Group-in-Group Policy Optimization for LLM Agent Training", Sec. 4.2)
notices that episodes started from the same initial state revisit the same states, and uses
every repeated state as an *anchor*: the actions taken there by different episodes (or the
same episode at different times) are compared with each other. Grouping is by exact state
(a hashable key) or, for text states, by similarity.
"""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import Any, Callable, Hashable, Sequence


def _exact_key(state: Any, index: int) -> Hashable:
    try:
        hash(state)
    except TypeError:
        raise TypeError(
            f"anchor_state of step {index} is unhashable ({type(state).__name__}): return a tuple/str from the "
            "environment, or pass a state_key function that maps it to a hashable key"
        ) from None
    return state


def anchor_group_ids(
    group_ids: Sequence[int],
    states: Sequence[Any],
    mode: str = "exact",
    threshold: float = 0.95,
    state_key: Callable[[Any], Any] | None = None,
) -> list[int]:
    """One anchor-group id per step; steps share an id iff they are in the same episode group and
    their states match.

    ``mode="exact"``: states (or ``state_key(state)``) are equal. ``mode="similarity"``: the
    text of the state (``str`` of it, or of ``state_key(state)``) has a difflib ratio
    ``2*M/T >= threshold`` with the first state of an existing anchor group (greedy, in
    step order), else it starts a new one. The new text is difflib's first argument and the
    group's first text its second, as in verl-agent (the ratio is not symmetric).
    """
    if len(group_ids) != len(states):
        raise ValueError(f"anchor_group_ids: {len(group_ids)} group ids for {len(states)} states")
    keys = [state_key(s) if state_key else s for s in states]
    ids: list[int] = []
    if mode == "exact":
        table: dict[tuple[int, Hashable], int] = {}
        for i, (g, key) in enumerate(zip(group_ids, keys)):
            ids.append(table.setdefault((g, _exact_key(key, i)), len(table)))
        return ids
    if mode == "similarity":
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"anchor_group_ids: threshold must be in (0, 1], got {threshold}")
        representatives: dict[int, list[tuple[str, int]]] = {}  # episode group -> [(text, anchor id)]
        n_anchors = 0
        for g, key in zip(group_ids, keys):
            text = key if isinstance(key, str) else str(key)
            reps = representatives.setdefault(g, [])
            for rep_text, anchor in reps:
                if rep_text == text or SequenceMatcher(None, text, rep_text, autojunk=False).ratio() >= threshold:
                    ids.append(anchor)
                    break
            else:
                reps.append((text, n_anchors))
                ids.append(n_anchors)
                n_anchors += 1
        return ids
    raise ValueError(f"anchor_group_ids: mode must be 'exact' or 'similarity', got {mode!r}")
