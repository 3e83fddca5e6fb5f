"""Dynamic sampling (DAPO, Yu et al., 2025, Sec. 3.2): train only on groups whose members disagree.

A group whose members all get the same verdict has advantage 0 everywhere under a group-relative
estimator: it costs a forward and backward and teaches nothing (with a KL or entropy term, it only
pulls toward the reference). Dynamic sampling drops such groups and generates more, a whole
rollout batch at a time, until ``batch_size`` groups are kept or ``max_batches`` batches have
been generated, then trains on what it has (surplus groups of the last batch are dropped too).

The verdict is the task's judge by default (``metric: judge``: the ``correct_reward`` a group
agrees on, correct or not), not the shaped score: a group that is all wrong but differs in a
format bonus has score variance and nothing to learn about the task (the bug NeMo-RL#2431 and
verl-recipe#125 describe); ``metric: score`` uses the episode score.

Several processes: each round every process generates and scores its share of the groups (a group
never spans processes), the rounds are gathered, the kept groups are chosen from the gathered batch
(the same on every process), cut to a multiple of the process count and shared out by whole groups.
Resume-exact: the rounds draw rows from the trainer's sampler (its position is in the checkpoint)
and sample with the RNG the checkpoint restores, so a resumed step generates the same rounds.
"""

from __future__ import annotations

from typing import Callable

from grouprl.records import Episode, Verdict
from grouprl.rewards.scorer import Scores
from grouprl.train.parallel import GlobalBatch, shard_slice


def group_members(episodes: list[Episode]) -> dict[int, list[int]]:
    """Episode indices by group id, groups in order of first appearance."""
    groups: dict[int, list[int]] = {}
    for i, ep in enumerate(episodes):
        groups.setdefault(ep.group_id, []).append(i)
    return groups


def group_agrees(verdicts: list[Verdict], metric: str) -> bool:
    """Whether every member has the same verdict (``judge``) or score (``score``): zero variance."""
    values = {bool(v.correct) for v in verdicts} if metric == "judge" else {float(v.score) for v in verdicts}
    return len(values) == 1


class DynamicSampler:
    def __init__(self, metric: str, max_batches: int, batch_size: int, parallel):
        self.metric, self.max_batches, self.batch_size, self.parallel = metric, max_batches, batch_size, parallel

    def collect(self, draw: Callable[[], tuple[GlobalBatch, Scores]]) -> tuple[GlobalBatch, Scores]:
        """Rounds of ``draw()`` (rollout + score + gather of one batch) until the batch is full."""
        kept: list[list[tuple[Episode, Verdict]]] = []
        generated = agreeing = agreeing_score = rounds = 0
        reward_errors = 0.0
        batch, scores = draw()  # at least one round: max_batches >= 1
        while True:
            rounds += 1
            reward_errors += scores.metrics.get("reward_errors", 0.0)
            for members in group_members(batch.episodes).values():
                verdicts = [scores.verdicts[i] for i in members]
                generated += 1
                agreeing_score += group_agrees(verdicts, "score")
                if group_agrees(verdicts, self.metric):
                    agreeing += 1
                elif len(kept) < self.batch_size:
                    kept.append([(batch.episodes[i], scores.verdicts[i]) for i in members])
            if rounds >= self.max_batches or len(kept) >= self.batch_size:
                break
            batch, scores = draw()
        world = self.parallel.info.world_size
        n = len(kept) - len(kept) % world  # whole groups, the same number on every process
        metrics = {
            **scores.metrics,
            "dynamic_sampling/batches": float(rounds),
            "dynamic_sampling/groups_kept": float(n),
            "dynamic_sampling/groups_dropped": float(generated - n),
            "dynamic_sampling/zero_variance_fraction": agreeing / generated,
            # the step's zero-std share as before dynamic sampling: over every generated group, by score
            "frac_reward_zero_std": agreeing_score / generated,
        }
        if "reward_errors" in metrics:
            metrics["reward_errors"] = reward_errors
        if n == 0:  # nothing disagreed: train on the last batch as it is (zero advantages, no policy gradient)
            metrics["dynamic_sampling/groups_kept"] = 0.0
            return batch, Scores(scores.episode, scores.verdicts, scores.parts, metrics)
        episodes, verdicts = [], []
        for group in kept[:n]:  # group ids stay as born: unique across a step's rounds
            for ep, verdict in group:
                episodes.append(ep)
                verdicts.append(verdict)
        mine = shard_slice(n, self.parallel.info)
        size = [len(group) for group in kept[:n]]
        start, stop = sum(size[: mine.start]), sum(size[: mine.stop])
        return GlobalBatch(episodes, start, stop), Scores.of(verdicts, None, metrics)
