"""``invalid_penalty: on_step`` GiGPO against verl-agent's flow, written out from its equations.

verl-agent (``apply_invalid_action_penalty``, then ``core_gigpo.episode_norm_reward`` and
``step_norm_reward``) treats every step as a row: the row's score is its episode's score minus the
row's penalty, the row's step reward is its discounted return minus the penalty, and only then are
the group (episode level) and anchor-group (step level) statistics taken. The reference below
follows those equations row by row in plain Python; grouprl's vectorised estimator must agree.
"""

from __future__ import annotations

import random
import statistics
from difflib import SequenceMatcher

import pytest
import torch

from grouprl.algos.advantages import StepTensors, discounted_returns, gigpo_parts
from grouprl.algos.anchors import anchor_group_ids


def verl_agent_reference(rows, gamma, omega, norm, episode_stats, eps=1e-6):
    """rows: dicts with group, episode, score, reward, penalty, state (an episode's rows contiguous, in order)."""
    # discounted returns per episode, then the penalty on the row itself
    returns = [0.0] * len(rows)
    running, current = 0.0, None
    for i in range(len(rows) - 1, -1, -1):
        if rows[i]["episode"] != current:
            running, current = 0.0, rows[i]["episode"]
        running = rows[i]["reward"] + gamma * running
        returns[i] = running
    row_score = [r["score"] - r["penalty"] for r in rows]
    row_return = [returns[i] - r["penalty"] for i, r in enumerate(rows)]

    def stats(values):
        if len(values) == 1:
            return values[0], 1.0  # step groups: mean of one (verl-agent); episode groups never have one here
        return statistics.fmean(values), statistics.stdev(values)

    def normalise(value, mean, std):
        return value - mean if norm == "mean_norm" else (value - mean) / (std + eps)

    by_group: dict[int, list[float]] = {}
    seen = set()
    for i, r in enumerate(rows):
        if episode_stats == "episode" and (r["group"], r["episode"]) in seen:
            continue
        seen.add((r["group"], r["episode"]))
        by_group.setdefault(r["group"], []).append(row_score[i])
    a_e = [normalise(row_score[i], *stats(by_group[r["group"]])) for i, r in enumerate(rows)]
    by_anchor: dict[tuple, list[float]] = {}
    for i, r in enumerate(rows):
        by_anchor.setdefault((r["group"], r["state"]), []).append(row_return[i])
    a_s = [normalise(row_return[i], *stats(by_anchor[(r["group"], r["state"])])) for i, r in enumerate(rows)]
    return [e + omega * s for e, s in zip(a_e, a_s)]


def grouprl_advantage(rows, scores, gamma, omega, norm, episode_stats):
    steps = StepTensors(
        episode=torch.tensor([r["episode"] for r in rows]),
        rewards=torch.tensor([r["reward"] for r in rows], dtype=torch.float64),
        anchor=torch.tensor(anchor_group_ids([r["group"] for r in rows], [r["state"] for r in rows])),
        penalty=torch.tensor([r["penalty"] for r in rows], dtype=torch.float64),
    )
    groups = torch.tensor([g for g, _ in scores])
    episode_scores = torch.tensor([s for _, s in scores], dtype=torch.float64)
    return gigpo_parts(
        episode_scores, groups, steps, gamma=gamma, step_advantage_weight=omega, norm=norm, episode_stats=episode_stats
    ).advantage.tolist()


def random_batch(seed: int, groups: int = 3, per_group: int = 4):
    rng = random.Random(seed)
    rows, scores = [], []
    for g in range(groups):
        for _ in range(per_group):
            e = len(scores)
            scores.append((g, rng.choice([0.0, 0.5, 1.0, rng.random()])))
            for _ in range(rng.randint(1, 5)):
                invalid = rng.random() < 0.3
                rows.append(
                    {
                        "group": g,
                        "episode": e,
                        "score": scores[-1][1],
                        "reward": rng.choice([0.0, 0.0, 1.0]),
                        "penalty": 0.1 if invalid else 0.0,
                        "state": rng.randint(0, 3),
                    }
                )
    assert any(r["penalty"] for r in rows)
    return rows, scores


@pytest.mark.parametrize("norm", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("episode_stats", ["episode", "per_step"])
def test_on_step_equals_verl_agent_on_random_batches_with_invalid_actions(norm, episode_stats):
    for seed in range(20):
        rows, scores = random_batch(seed)
        expected = verl_agent_reference(rows, 0.9, 1.0, norm, episode_stats)
        got = grouprl_advantage(rows, scores, 0.9, 1.0, norm, episode_stats)
        assert got == pytest.approx(expected, abs=1e-9), seed


def test_on_step_by_hand():
    """One group, two episodes (scores 1 and 0.5), gamma 0.5, mean_norm, episode statistics.

    e0: states A, B; rewards 0, 1 -> returns 0.5, 1.0
    e1: states A, A; rewards 0, 1 -> returns 0.5, 1.0; its second step is invalid (p = 0.1)

    rows' scores: 1, 1, 0.5, 0.4; group mean over first rows (1, 0.5) = 0.75
      A_E = 0.25, 0.25, -0.25, -0.35
    rows' returns: 0.5, 1.0, 0.5, 0.9; anchor A = rows 0, 2, 3 (mean 1.9 / 3), B = row 1 alone
      A_S = 0.5 - 0.6333, 0, 0.5 - 0.6333, 0.9 - 0.6333
    """
    rows = [
        {"group": 0, "episode": 0, "score": 1.0, "reward": 0.0, "penalty": 0.0, "state": "A"},
        {"group": 0, "episode": 0, "score": 1.0, "reward": 1.0, "penalty": 0.0, "state": "B"},
        {"group": 0, "episode": 1, "score": 0.5, "reward": 0.0, "penalty": 0.0, "state": "A"},
        {"group": 0, "episode": 1, "score": 0.5, "reward": 1.0, "penalty": 0.1, "state": "A"},
    ]
    m = 1.9 / 3
    expected = [0.25 + 0.5 - m, 0.25, -0.25 + 0.5 - m, -0.35 + 0.9 - m]
    assert grouprl_advantage(rows, [(0, 1.0), (0, 0.5)], 0.5, 1.0, "mean_norm", "episode") == pytest.approx(expected)
    assert verl_agent_reference(rows, 0.5, 1.0, "mean_norm", "episode") == pytest.approx(expected)
    # per_step: the mean is over all four rows' scores (1, 1, 0.5, 0.4) = 0.725
    per_step = [0.275 + 0.5 - m, 0.275, -0.225 + 0.5 - m, -0.325 + 0.9 - m]
    assert grouprl_advantage(rows, [(0, 1.0), (0, 0.5)], 0.5, 1.0, "mean_norm", "per_step") == pytest.approx(per_step)


def test_without_penalties_the_estimator_is_unchanged():
    rows, scores = random_batch(3)
    for r in rows:
        r["penalty"] = 0.0
    steps = StepTensors(
        episode=torch.tensor([r["episode"] for r in rows]),
        rewards=torch.tensor([r["reward"] for r in rows], dtype=torch.float64),
        anchor=torch.tensor(anchor_group_ids([r["group"] for r in rows], [r["state"] for r in rows])),
    )
    plain = gigpo_parts(
        torch.tensor([s for _, s in scores], dtype=torch.float64),
        torch.tensor([g for g, _ in scores]),
        steps,
        gamma=0.9,
    )
    assert plain.advantage.tolist() == pytest.approx(grouprl_advantage(rows, scores, 0.9, 1.0, "mean_norm", "episode"))
    assert plain.returns.tolist() == pytest.approx(discounted_returns(steps.rewards, steps.episode, 0.9).tolist())


def test_similarity_compares_the_new_text_against_the_group_first_as_verl_agent():
    # difflib's ratio is not symmetric: ratio('a.ba.', 'bb.') = 0.25, ratio('bb.', 'a.ba.') = 0.5
    assert SequenceMatcher(None, "a.ba.", "bb.").ratio() == 0.25
    assert SequenceMatcher(None, "bb.", "a.ba.").ratio() == 0.5
    # verl-agent: are_similar(new_obs, cluster_rep) -> 0.25 < 0.4, a new anchor group
    assert anchor_group_ids([0, 0], ["bb.", "a.ba."], "similarity", threshold=0.4) == [0, 1]
