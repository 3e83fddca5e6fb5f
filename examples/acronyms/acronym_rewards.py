"""Rewards for the acronym example, in TRL's signature: ``f(completions, **columns) -> list[float]``.

The dataset's ``acronym`` column (not a ``solution`` column: any column reaches the reward by
its name) holds the answer; ``words`` holds how many words the phrase has.
"""


def acronym_exact(completions, acronym, **kwargs):
    """1.0 when the completion is exactly the acronym (surrounding spaces ignored), else 0.0."""
    return [float(c[0]["content"].strip() == a) for c, a in zip(completions, acronym)]


def acronym_letters(completions, acronym, words, **kwargs):
    """Share of the acronym's letters in place, less a penalty for extra characters (dense shaping)."""
    scores = []
    for completion, answer, n in zip(completions, acronym, words):
        text = completion[0]["content"].strip()
        hits = sum(a == b for a, b in zip(text, answer))
        scores.append(hits / n - 0.1 * max(0, len(text) - n))
    return scores
