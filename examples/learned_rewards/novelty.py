"""A learned reward you write yourself: a count-based novelty bonus, trained online on every batch.

Named in a recipe next to fixed rewards (see config_novelty.yaml)::

    rewards:
      - arithmetic_exact
      - {name: examples/learned_rewards/novelty.py:make_reward, weight: 0.5, options: {scale: 1.0}}

The object follows the learned-reward protocol (grouprl/rewards/learned/protocol.py):

* ``score(episodes)``: one float per episode, no gradients: ``scale / sqrt(1 + n(answer | question))``,
  where ``n`` counts how often this answer was given to this question in earlier batches. A policy that
  keeps answering the same thing earns less and less of it (an exploration bonus; the fixed reward still
  decides what is right).
* ``update(episodes)``: learns from the batch just scored. It first gathers every process's episodes
  (``gather_across_processes``), so each process applies the same update and the copies stay identical
  without a broadcast. Frozen (``frozen = True`` during evaluation): it reports and learns nothing.
* ``state_dict()`` / ``load_state_dict()``: what a checkpoint keeps (``learned_rewards.pt``), so a resumed
  run continues with the same counts.

``make_reward`` is the factory the recipe names (decorated ``@learned_reward``): it receives the recipe's
``options``. It may also return ``(reward, mixer)`` to mix with a ``RewardMixer`` (GRAIL's
``LearnableMixer``: R = alpha * B + beta * D with alpha, beta learned) instead of R = B + weight * D.
"""

from __future__ import annotations

import math
from collections import Counter

from grouprl.rewards.learned.gather import gather_across_processes
from grouprl.rewards.learned.mixer import LearnableMixer
from grouprl.rewards.learned.model_rewards import learned_reward


def _key(episode) -> str:
    answer = episode.steps[-1].action_text.strip() if episode.steps else ""
    return f"{episode.row.get('question', '')}\x00{answer}"


class AnswerNovelty:
    name = "novelty"

    def __init__(self, scale: float = 1.0):
        self.scale = scale
        self.counts: Counter[str] = Counter()
        self.frozen = False

    def score(self, episodes) -> list[float]:
        return [self.scale / math.sqrt(1 + self.counts[_key(ep)]) for ep in episodes]

    def update(self, episodes) -> dict[str, float]:
        keys = gather_across_processes([_key(ep) for ep in episodes])  # every process's batch, in rank order
        if not self.frozen:
            self.counts.update(keys)
        return {"novelty/distinct_answers": float(len(self.counts)),
                "novelty/repeat_share": sum(self.counts[k] > 1 for k in keys) / max(len(keys), 1)}

    def state_dict(self) -> dict:
        return {"counts": dict(self.counts), "scale": self.scale}

    def load_state_dict(self, state: dict) -> None:
        self.counts = Counter(state["counts"])
        self.scale = state["scale"]


@learned_reward
def make_reward(scale: float = 1.0, learnable_mix: bool = False):
    reward = AnswerNovelty(scale)
    return (reward, LearnableMixer(base_weight=1.0, learned_weight=0.5)) if learnable_mix else reward
