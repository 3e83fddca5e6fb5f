"""GiGPO against numbers worked out by hand from the paper's equations, and its special cases.

Hand-built group (G = 3 episodes from one initial state A, gamma = 0.5):

    episode 0: states A, B        step rewards 0, 1      score R = 1
    episode 1: states A, C, B     step rewards 0, 0, 1   score R = 1
    episode 2: states A, C        step rewards 0, 0      score R = 0

Discounted returns R_t = r_t + gamma * R_{t+1}:
    e0: t1 = 1,            t0 = 0 + 0.5 * 1 = 0.5
    e1: t2 = 1, t1 = 0.5,  t0 = 0.25
    e2: t1 = 0, t0 = 0

Episode level (Eq. 3), mean_norm (F = 1): mean R = 2/3, A_E = [1/3, 1/3, -2/3].
Anchor groups (Eq. 5-6): A = {e0t0: 0.5, e1t0: 0.25, e2t0: 0}  mean 0.25 -> A_S = +0.25, 0, -0.25
                         B = {e0t1: 1, e1t2: 1}                mean 1    -> A_S = 0, 0
                         C = {e1t1: 0.5, e2t1: 0}              mean 0.25 -> A_S = +0.25, -0.25
Combined (omega = 1), per step in order e0t0 e0t1 e1t0 e1t1 e1t2 e2t0 e2t1:
    1/3 + 0.25, 1/3, 1/3, 1/3 + 0.25, 1/3, -2/3 - 0.25, -2/3 - 0.25

mean_std_norm (F = std + 1e-6, unbiased std):
    scores std = sqrt(((1/3)^2 + (1/3)^2 + (2/3)^2) / 2) = sqrt(1/3) = 0.57735 -> A_E = [0.57735, 0.57735, -1.1547]
    anchor A: std = sqrt((0.0625 + 0 + 0.0625) / 2) = 0.25    -> A_S = +1, 0, -1
    anchor B: std = 0                                           -> A_S = 0, 0
    anchor C: std = sqrt(0.125 / 1) = 0.353553                  -> A_S = +0.707107, -0.707107
episode_stats = per_step: each step carries its episode's score: [1, 1, 1, 1, 1, 0, 0], mean 5/7
    -> A_E = 2/7 on e0/e1 steps, -5/7 on e2 steps (mean_norm).
"""

from __future__ import annotations

import pytest
import torch

from grouprl.algos.advantages import StepTensors, discounted_returns, gigpo_parts, grpo_advantage, step_advantages
from grouprl.algos.anchors import anchor_group_ids

STATES = ["A", "B", "A", "C", "B", "A", "C"]
EPISODE = [0, 0, 1, 1, 1, 2, 2]
REWARDS = [0, 1, 0, 0, 1, 0, 0]
SCORES = [1.0, 1.0, 0.0]


def hand_group():
    anchors = anchor_group_ids([0] * 7, STATES)
    steps = StepTensors(torch.tensor(EPISODE), torch.tensor(REWARDS, dtype=torch.float32), torch.tensor(anchors))
    return torch.tensor(SCORES), torch.zeros(3, dtype=torch.long), steps


def test_returns_by_hand():
    r = discounted_returns(torch.tensor(REWARDS, dtype=torch.float32), torch.tensor(EPISODE), 0.5)
    assert r.tolist() == pytest.approx([0.5, 1, 0.25, 0.5, 1, 0, 0])


def test_gigpo_mean_norm_by_hand():
    scores, groups, steps = hand_group()
    p = gigpo_parts(scores, groups, steps, gamma=0.5)
    third = 1 / 3
    assert p.episode_advantage.tolist() == pytest.approx([third, third, third, third, third, -2 * third, -2 * third])
    assert p.step_advantage.tolist() == pytest.approx([0.25, 0, 0, 0.25, 0, -0.25, -0.25])
    assert p.anchor_size.tolist() == [3, 2, 3, 2, 2, 3, 2]
    assert p.advantage.tolist() == pytest.approx(
        [third + 0.25, third, third, third + 0.25, third, -2 * third - 0.25, -2 * third - 0.25]
    )
    half = gigpo_parts(scores, groups, steps, gamma=0.5, step_advantage_weight=0.5).advantage
    assert half.tolist() == pytest.approx((p.episode_advantage + 0.5 * p.step_advantage).tolist())


def test_gigpo_mean_std_norm_by_hand():
    scores, groups, steps = hand_group()
    p = gigpo_parts(scores, groups, steps, gamma=0.5, norm="mean_std_norm")
    a = 0.57735
    assert p.episode_advantage.tolist() == pytest.approx([a, a, a, a, a, -2 * a, -2 * a], abs=1e-4)
    assert p.step_advantage.tolist() == pytest.approx([1, 0, 0, 0.707107, 0, -1, -0.707107], abs=1e-4)


def test_gigpo_per_step_episode_stats():
    scores, groups, steps = hand_group()
    p = gigpo_parts(scores, groups, steps, gamma=0.5, episode_stats="per_step")
    assert p.episode_advantage.tolist() == pytest.approx([2 / 7] * 5 + [-5 / 7] * 2)


def test_gigpo_equals_grpo_when_no_anchor_repeats():
    torch.manual_seed(0)
    n_groups, G = 4, 6
    scores = torch.rand(n_groups * G)
    groups = torch.arange(n_groups).repeat_interleave(G)
    lengths = torch.randint(1, 5, (n_groups * G,))
    episode = torch.repeat_interleave(torch.arange(n_groups * G), lengths)
    states = [f"unique-{i}" for i in range(len(episode))]  # no state is seen twice
    steps = StepTensors(
        episode, torch.rand(len(episode)), torch.tensor(anchor_group_ids(groups[episode].tolist(), states))
    )
    gigpo = step_advantages("gigpo", scores, groups, steps)
    assert torch.equal(gigpo, grpo_advantage(scores, groups, scale="none")[episode])
    gigpo_std = step_advantages("gigpo", scores, groups, steps, norm="mean_std_norm", epsilon=1e-4)
    assert torch.equal(gigpo_std, step_advantages("grpo", scores, groups, steps))  # grpo's eps is 1e-4


def test_anchor_groups_stay_inside_episode_groups():
    # The same state in two different episode groups (different seeds) is not one anchor.
    assert anchor_group_ids([0, 0, 1, 1], ["s", "s", "s", "t"]) == [0, 0, 1, 2]


def test_similarity_mode_groups_near_identical_text_and_separates_different_text():
    board = "Current map:\nFHFF\nFFFP\nHFFF\nGFHF\n" + "x" * 60
    near = board.replace("FFFP", "FFPF")  # one cell differs in a long observation
    other = "a completely different observation of another state"
    ids = anchor_group_ids([0, 0, 0], [board, near, other], mode="similarity", threshold=0.95)
    assert ids[0] == ids[1] != ids[2]
    assert anchor_group_ids([0, 0], [board, near], mode="similarity", threshold=0.999) == [0, 1]
    assert anchor_group_ids([0, 0], [board, near], mode="exact") == [0, 1]


def test_state_key_and_unhashable_states():
    states = [{"pos": (0, 1), "t": 1}, {"pos": (0, 1), "t": 2}]
    assert anchor_group_ids([0, 0], states, state_key=lambda s: s["pos"]) == [0, 0]
    with pytest.raises(TypeError, match="anchor_state of step 0 is unhashable.*state_key"):
        anchor_group_ids([0, 0], states)


def test_bad_options_are_named():
    scores, groups, steps = hand_group()
    with pytest.raises(ValueError, match="norm"):
        gigpo_parts(scores, groups, steps, norm="std")
    with pytest.raises(ValueError, match="step-level"):
        step_advantages("gigpo", scores, groups, None)  # type: ignore[arg-type]
