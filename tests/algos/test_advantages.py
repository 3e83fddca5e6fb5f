"""Advantage estimators and the clipped policy-gradient loss on hand-computed examples."""

from __future__ import annotations

import math

import pytest
import torch

from grouprl.algos.advantages import ADVANTAGES, EPS, get_estimator, group_stats, run_estimator
from grouprl.algos.loss import policy_loss
from grouprl.policy.logprobs import entropy_from_logits, selective_log_softmax


def adv(name, scores, groups, **kw):
    return run_estimator(get_estimator(name), torch.tensor(scores, dtype=torch.float32), torch.tensor(groups), **kw)


def close(actual, expected, tol=1e-4):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=tol, rtol=tol)


def test_registry_names():
    assert set(ADVANTAGES) == {"grpo", "dr_grpo", "rloo", "gigpo", "gdpo"}
    with pytest.raises(KeyError, match="unknown advantage estimator 'ppo'"):
        adv("ppo", [1, 0], [0, 0])


# --- one group [1, 0, 0, 1] -------------------------------------------------------------------
# mean 0.5; unbiased std sqrt(((.5^2) * 4) / 3) = sqrt(1/3) = 0.57735

ONE = [1.0, 0.0, 0.0, 1.0]
STD_ONE = 0.5773503


def test_group_stats_one_group():
    mean, std, count = group_stats(torch.tensor(ONE), torch.tensor([0, 0, 0, 0]))
    close(mean, [0.5] * 4)
    close(std, [STD_ONE] * 4)
    assert count.tolist() == [4, 4, 4, 4]


def test_grpo_group_scale_one_group():
    a = 0.5 / (STD_ONE + 1e-4)  # = 0.865875
    assert EPS == 1e-4
    close(adv("grpo", ONE, [0] * 4), [a, -a, -a, a])
    close(adv("grpo", ONE, [0] * 4), [0.865875, -0.865875, -0.865875, 0.865875])
    # group is the default scale
    close(adv("grpo", ONE, [0] * 4, scale="group"), [a, -a, -a, a])


def test_grpo_batch_scale_one_group_equals_group_scale():
    a = 0.5 / (STD_ONE + 1e-4)
    close(adv("grpo", ONE, [0] * 4, scale="batch"), [a, -a, -a, a])


def test_grpo_none_and_dr_grpo_one_group():
    close(adv("grpo", ONE, [0] * 4, scale="none"), [0.5, -0.5, -0.5, 0.5])
    close(adv("dr_grpo", ONE, [0] * 4), [0.5, -0.5, -0.5, 0.5])


def test_rloo_one_group():
    # r_i - mean of the other three: 1 - 1/3 = 2/3, 0 - 2/3 = -2/3
    close(adv("rloo", ONE, [0] * 4), [2 / 3, -2 / 3, -2 / 3, 2 / 3])


def test_grpo_unknown_scale():
    with pytest.raises(ValueError, match="scale"):
        adv("grpo", ONE, [0] * 4, scale="bogus")


# --- two groups, interleaved ids --------------------------------------------------------------
# position: 0    1    2    3    4    5
# group:    A    B    A    B    A    B        (A = 10, B = 3: ids need not be 0..n-1 or sorted)
# score:    1    0    2    0    3    1
# A = [1, 2, 3]: mean 2, unbiased std sqrt((1 + 0 + 1) / 2) = 1
# B = [0, 0, 1]: mean 1/3, unbiased std sqrt((1/9 + 1/9 + 4/9) / 2) = sqrt(1/3) = 0.57735
# centred: [-1, -1/3, 0, -1/3, 1, 2/3]
# batch: mean 7/6, unbiased std sqrt(6.833333 / 5) = 1.169045

SCORES = [1.0, 0.0, 2.0, 0.0, 3.0, 1.0]
GROUPS = [10, 3, 10, 3, 10, 3]
CENTRED = [-1.0, -1 / 3, 0.0, -1 / 3, 1.0, 2 / 3]


def test_group_stats_interleaved():
    mean, std, count = group_stats(torch.tensor(SCORES), torch.tensor(GROUPS))
    close(mean, [2, 1 / 3, 2, 1 / 3, 2, 1 / 3])
    close(std, [1, STD_ONE, 1, STD_ONE, 1, STD_ONE])
    assert count.tolist() == [3] * 6


def test_grpo_group_scale_interleaved():
    sa, sb = 1 + 1e-4, STD_ONE + 1e-4
    expected = [-1 / sa, -1 / 3 / sb, 0.0, -1 / 3 / sb, 1 / sa, 2 / 3 / sb]
    close(adv("grpo", SCORES, GROUPS), expected)
    close(adv("grpo", SCORES, GROUPS), [-0.9999, -0.577250, 0.0, -0.577250, 0.9999, 1.154500])


def test_grpo_batch_scale_interleaved():
    s = 1.169045 + 1e-4
    close(adv("grpo", SCORES, GROUPS, scale="batch"), [c / s for c in CENTRED])


def test_grpo_none_and_dr_grpo_interleaved():
    close(adv("grpo", SCORES, GROUPS, scale="none"), CENTRED)
    close(adv("dr_grpo", SCORES, GROUPS), CENTRED)


def test_rloo_interleaved():
    # A: 1 - (2+3)/2 = -1.5, 2 - (1+3)/2 = 0, 3 - (1+2)/2 = 1.5
    # B: 0 - (0+1)/2 = -0.5, 0 - 0.5 = -0.5, 1 - 0 = 1
    close(adv("rloo", SCORES, GROUPS), [-1.5, -0.5, 0.0, -0.5, 1.5, 1.0])


def test_result_does_not_depend_on_group_order():
    perm = [4, 1, 5, 0, 3, 2]
    for name, kw in [("grpo", {}), ("grpo", {"scale": "batch"}), ("dr_grpo", {}), ("rloo", {})]:
        full = adv(name, SCORES, GROUPS, **kw)
        permuted = adv(name, [SCORES[i] for i in perm], [GROUPS[i] for i in perm], **kw)
        torch.testing.assert_close(permuted, full[perm])


def test_advantages_sum_to_zero_within_each_group():
    for name in ("grpo", "dr_grpo", "rloo"):
        a = adv(name, SCORES, GROUPS)
        assert abs(float(a[[0, 2, 4]].sum())) < 1e-5 and abs(float(a[[1, 3, 5]].sum())) < 1e-5


# --- degenerate groups ------------------------------------------------------------------------

ESTIMATORS = [
    ("grpo", {"scale": "group"}),
    ("grpo", {"scale": "batch"}),
    ("grpo", {"scale": "none"}),
    ("dr_grpo", {}),
    ("rloo", {}),
]


@pytest.mark.parametrize("name, kw", ESTIMATORS)
@pytest.mark.parametrize("value", [0.0, 1.0, 0.5, -2.0])
@pytest.mark.parametrize("size", [2, 4, 8, 16])
def test_all_equal_group_gives_exact_zeros(name, kw, value, size):
    a = adv(name, [value] * size, [0] * size, **kw)
    assert torch.equal(a, torch.zeros(size)), a


@pytest.mark.parametrize("name, kw", ESTIMATORS)
@pytest.mark.parametrize("value", [0.7, 0.1, 1 / 3, 1 / 6])  # arithmetic_digits gives 1/6, 1/3, ...
@pytest.mark.parametrize("size", [2, 3, 4, 8, 16])
def test_all_equal_group_of_inexact_floats_gives_zeros(name, kw, value, size):
    # The trap (grpo with std scaling at size 8 and 16): the float32 group mean of 8 x 0.7 is
    # 0.70000005, so r - mean = -6e-8 and std = 6e-8, and a plain (r - mean) / (std + 1e-4) gives
    # -6e-4 for every member instead of 0.
    a = adv(name, [value] * size, [0] * size, **kw)
    torch.testing.assert_close(a, torch.zeros(size), atol=1e-6, rtol=0)


def test_all_equal_group_next_to_a_varied_group():
    scores = [0.3, 1.0, 0.3, 0.0, 0.3, 1.0]
    groups = [0, 1, 0, 1, 0, 1]
    for name, kw in ESTIMATORS:
        a = adv(name, scores, groups, **kw)
        assert a[[0, 2, 4]].abs().max() < 1e-6, (name, kw, a)
        assert a[[1, 3, 5]].abs().max() > 0.1, (name, kw, a)


def test_rloo_group_of_one_is_zero():
    close(adv("rloo", [5.0], [0]), [0.0])
    # a singleton next to a real group: the singleton gets 0, the pair r_i - r_j
    close(adv("rloo", [5.0, 1.0, 0.0], [7, 2, 2]), [0.0, 1.0, -1.0])


def test_grpo_and_dr_grpo_group_of_one_is_zero():
    for name, kw in ESTIMATORS[:4]:
        a = adv(name, [5.0, 1.0, 0.0], [7, 2, 2], **kw)
        assert float(a[0]) == 0.0, (name, kw)


def test_batch_of_one_episode():
    for name, kw in ESTIMATORS:
        assert adv(name, [3.0], [0], **kw).tolist() == [0.0]


# --- policy_loss --------------------------------------------------------------------------------
# Two sequences, three token slots; the second has one real token.
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])
A2 = torch.tensor([1.0, -2.0])


def test_ratio_one_grpo_is_minus_mean_advantage():
    logps = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.3, 0.6, 0.1]]))
    loss, stats = policy_loss(logps, logps.clone(), A2, MASK, loss_type="grpo")
    # per token -A; per sequence mean: -1 and +2; over sequences: 0.5 = -mean(A)
    assert float(loss) == pytest.approx(0.5)
    assert float(loss) == pytest.approx(-float(A2.mean()))
    assert float(stats["clip_ratio/region_mean"]) == 0.0
    assert "kl" not in stats


def test_ratio_one_dapo_and_dr_grpo():
    logps = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.3, 0.6, 0.1]]))
    # sum over the 4 real tokens of -A: -1 -1 -1 +2 = -1
    loss, _ = policy_loss(logps, logps, A2, MASK, loss_type="dapo")
    assert float(loss) == pytest.approx(-1 / 4)
    loss, _ = policy_loss(logps, logps, A2, MASK, loss_type="dapo", num_items_in_batch=8)
    assert float(loss) == pytest.approx(-1 / 8)
    loss, _ = policy_loss(logps, logps, A2, MASK, loss_type="dr_grpo", max_completion_length=3)
    assert float(loss) == pytest.approx(-1 / (2 * 3))
    loss, _ = policy_loss(logps, logps, A2, MASK, loss_type="dr_grpo", max_completion_length=5)
    assert float(loss) == pytest.approx(-1 / (2 * 5))


def test_masked_tokens_do_not_count():
    logps = torch.zeros(2, 3)
    old = torch.zeros(2, 3)
    old[1, 1:] = -5.0  # padded slots with a wild ratio e^5
    for lt in ("grpo", "dapo", "dr_grpo"):
        a, _ = policy_loss(logps, old, A2, MASK, loss_type=lt, max_completion_length=3)
        b, _ = policy_loss(logps, torch.zeros(2, 3), A2, MASK, loss_type=lt, max_completion_length=3)
        assert float(a) == pytest.approx(float(b)), lt


def test_clipped_surrogate_hand_computed():
    # one sequence, ratios 1.1, 1.3, 0.7; eps 0.2 -> clip to [0.8, 1.2]
    old = torch.zeros(1, 3)
    logps = torch.log(torch.tensor([[1.1, 1.3, 0.7]]))
    mask = torch.ones(1, 3)
    # A = +1: -min(r, clip(r)) = -1.1, -1.2, -0.7 -> mean -1.0
    loss, stats = policy_loss(logps, old, torch.tensor([1.0]), mask, loss_type="grpo")
    assert float(loss) == pytest.approx(-1.0, abs=1e-6)
    assert float(stats["clip_ratio/high_mean"]) == pytest.approx(1 / 3)
    assert float(stats["clip_ratio/low_mean"]) == 0.0
    assert float(stats["clip_ratio/region_mean"]) == pytest.approx(1 / 3)
    # A = -1: -min(-r, -clip(r)) = max(r, clip(r)) = 1.1, 1.3, 0.8 -> mean 3.2 / 3
    loss, stats = policy_loss(logps, old, torch.tensor([-1.0]), mask, loss_type="grpo")
    assert float(loss) == pytest.approx(3.2 / 3, abs=1e-6)
    assert float(stats["clip_ratio/low_mean"]) == pytest.approx(1 / 3)
    assert float(stats["clip_ratio/high_mean"]) == 0.0


def _grad(ratio: float, advantage: float, **kw) -> float:
    logps = torch.tensor([[math.log(ratio)]], requires_grad=True)
    loss, _ = policy_loss(logps, torch.zeros(1, 1), torch.tensor([advantage]), torch.ones(1, 1), loss_type="grpo", **kw)
    loss.backward()
    return float(logps.grad)


def test_clipping_gradients():
    # ratio above 1 + eps with a positive advantage: clipped, no gradient
    assert _grad(1.3, 1.0) == 0.0
    # ratio below 1 - eps with a negative advantage: clipped, no gradient
    assert _grad(0.7, -1.0) == 0.0
    # the same ratios with the other sign are not clipped: d(-r A)/dlogp = -r A
    assert _grad(1.3, -1.0) == pytest.approx(1.3)
    assert _grad(0.7, 1.0) == pytest.approx(-0.7)
    # inside the trust region
    assert _grad(1.0, 1.0) == pytest.approx(-1.0)
    assert _grad(1.1, 2.0) == pytest.approx(-2.2)
    # DAPO clip-higher: eps_high 0.28 lets ratio 1.25 through
    assert _grad(1.25, 1.0, epsilon_high=0.28) == pytest.approx(-1.25)
    assert _grad(1.25, 1.0, epsilon_high=0.2) == 0.0


def test_k3_kl():
    logps = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.3, 0.6, 0.1]]))
    zero_adv = torch.zeros(2)
    loss, stats = policy_loss(logps, logps, zero_adv, MASK, beta=0.1, ref_logps=logps.clone())
    assert float(stats["kl"]) == 0.0 and float(loss) == 0.0
    # ref - logps = 0.5 everywhere: e^0.5 - 0.5 - 1 = 0.1487213
    loss, stats = policy_loss(logps, logps, zero_adv, MASK, beta=0.1, ref_logps=logps + 0.5)
    assert float(stats["kl"]) == pytest.approx(0.1487213, abs=1e-6)
    assert float(loss) == pytest.approx(0.1 * 0.1487213, abs=1e-6)
    # ref - logps = -0.5: e^-0.5 + 0.5 - 1 = 0.1065307
    _, stats = policy_loss(logps, logps, zero_adv, MASK, beta=0.1, ref_logps=logps - 0.5)
    assert float(stats["kl"]) == pytest.approx(0.1065307, abs=1e-6)
    # any difference is positive
    ref = logps + torch.randn(2, 3, generator=torch.Generator().manual_seed(0))
    _, stats = policy_loss(logps, logps, zero_adv, MASK, beta=0.1, ref_logps=ref)
    assert float(stats["kl"]) > 0


def test_kl_is_added_to_the_policy_term():
    logps = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.3, 0.6, 0.1]]))
    base, _ = policy_loss(logps, logps, A2, MASK, loss_type="grpo")
    with_kl, _ = policy_loss(logps, logps, A2, MASK, loss_type="grpo", beta=0.04, ref_logps=logps + 0.5)
    assert float(with_kl) == pytest.approx(float(base) + 0.04 * 0.1487213, abs=1e-6)


def test_dapo_gradient_accumulation_matches_full_batch():
    g = torch.Generator().manual_seed(1)
    logps = torch.randn(4, 5, generator=g)
    old = logps + 0.1 * torch.randn(4, 5, generator=g)
    advs = torch.tensor([1.0, -0.5, 0.3, -2.0])
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]])
    full, _ = policy_loss(logps, old, advs, mask, loss_type="dapo")
    n = float(mask.sum())
    parts = [
        policy_loss(logps[s], old[s], advs[s], mask[s], loss_type="dapo", num_items_in_batch=n)[0]
        for s in (slice(0, 2), slice(2, 4))
    ]
    assert float(sum(parts)) == pytest.approx(float(full), abs=1e-6)


def test_policy_loss_argument_errors():
    logps = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    with pytest.raises(ValueError, match="ref_logps"):
        policy_loss(logps, logps, torch.ones(1), mask, beta=0.1)
    with pytest.raises(ValueError, match="max_completion_length"):
        policy_loss(logps, logps, torch.ones(1), mask, loss_type="dr_grpo")
    with pytest.raises(ValueError, match="loss_type"):
        policy_loss(logps, logps, torch.ones(1), mask, loss_type="ppo")


# --- log-probs and entropy ----------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 2, 64])
def test_selective_log_softmax_matches_log_softmax_gather(chunk):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 7, 11, generator=g) * 3
    ids = torch.randint(0, 11, (5, 7), generator=g)
    expected = torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    got = selective_log_softmax(logits, ids, chunk=chunk)
    assert got.shape == (5, 7)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_selective_log_softmax_gradient_and_bf16():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 9, generator=g, requires_grad=True)
    ids = torch.randint(0, 9, (3, 4), generator=g)
    selective_log_softmax(logits, ids, chunk=2).sum().backward()
    ref_logits = logits.detach().clone().requires_grad_(True)
    torch.log_softmax(ref_logits, -1).gather(-1, ids.unsqueeze(-1)).sum().backward()
    torch.testing.assert_close(logits.grad, ref_logits.grad, atol=1e-5, rtol=1e-5)

    low = logits.detach().to(torch.bfloat16)
    got = selective_log_softmax(low, ids)
    assert got.dtype == torch.float32
    expected = torch.log_softmax(low.float(), -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_entropy_from_logits():
    uniform = torch.zeros(2, 3, 8)
    torch.testing.assert_close(entropy_from_logits(uniform, chunk=1), torch.full((2, 3), math.log(8)))
    peaked = torch.full((1, 1, 4), -1e4)
    peaked[..., 2] = 0
    assert float(entropy_from_logits(peaked)) == pytest.approx(0.0, abs=1e-6)
