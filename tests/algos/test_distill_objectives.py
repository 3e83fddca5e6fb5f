"""On-policy distillation's objectives (algos/distill_objectives.py): each equals a hand computation on a tiny
fixed batch, the JSD equals TRL's GKDTrainer.generalized_jsd_loss, and the table refuses what it does not know."""

from __future__ import annotations

import math
import os

import pytest
import torch

from grouprl.algos.distill_objectives import DISTILL_OBJECTIVES, get_objective, masked_mean
from grouprl.algos.loss import policy_objective
from grouprl.algos.policy_losses import LOSSES

STUDENT = torch.tensor([[-1.0, -2.0, -0.5]])
TEACHER = torch.tensor([[-1.5, -1.0, -0.5]])
# two positions over a three-token vocabulary
S_LOGITS = torch.tensor([[[1.0, 0.0, -1.0], [0.5, 0.5, 0.0]]])
T_LOGITS = torch.tensor([[[0.0, 2.0, -0.5], [1.0, -1.0, 0.0]]])


def _probs(logits: list[float]) -> list[float]:
    z = sum(math.exp(v) for v in logits)
    return [math.exp(v) / z for v in logits]


def _kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q))


def test_the_table_holds_four_objectives_with_their_forms():
    forms = {name: (o.form, o.inputs, o.options) for name, o in DISTILL_OBJECTIVES.items()}
    assert forms == {
        "reverse_kl_reward": ("reward", "logps", ()),
        "k3": ("loss", "logps", ()),
        "forward_kl": ("loss", "logits", ("top_k",)),
        "jsd": ("loss", "logits", ("beta",)),
    }
    with pytest.raises(KeyError, match="distill objective"):
        get_objective("nope")
    with pytest.raises(ValueError, match="unknown option 'beta'"):
        get_objective("k3")(STUDENT, TEACHER, beta=0.5)


def test_reverse_kl_reward_is_minus_k1_and_carries_no_gradient():
    student = STUDENT.clone().requires_grad_(True)
    r = get_objective("reverse_kl_reward")(student, TEACHER)
    assert r.tolist() == [[-0.5, 1.0, 0.0]]  # log pi_T - log pi_theta, token by token
    assert not r.requires_grad


def test_k3_by_hand_and_its_gradient_flows_through_the_student():
    student = STUDENT.clone().requires_grad_(True)
    d = get_objective("k3")(student, TEACHER)
    hand = [math.exp(t - s) - 1 - (t - s) for s, t in zip(STUDENT[0].tolist(), TEACHER[0].tolist())]
    assert d[0].tolist() == pytest.approx(hand)
    d.sum().backward()
    # d/ds [e^(t-s) - 1 - (t - s)] = 1 - e^(t-s)
    assert student.grad[0].tolist() == pytest.approx([1 - math.exp(t - s) for s, t in zip(STUDENT[0], TEACHER[0])])


def test_forward_kl_full_vocabulary_and_top_k_by_hand():
    d = get_objective("forward_kl")(S_LOGITS, T_LOGITS)
    for pos in range(2):
        p, q = _probs(T_LOGITS[0, pos].tolist()), _probs(S_LOGITS[0, pos].tolist())
        assert float(d[0, pos]) == pytest.approx(_kl(p, q), rel=1e-5)
    top = get_objective("forward_kl")(S_LOGITS, T_LOGITS, top_k=2)
    # position 0: the teacher keeps tokens 1 and 0, renormalised over them; the student's full log-softmax
    t = T_LOGITS[0, 0].tolist()
    kept = sorted(range(3), key=lambda v: -t[v])[:2]
    z = sum(math.exp(t[v]) for v in kept)
    q = _probs(S_LOGITS[0, 0].tolist())
    hand = sum(math.exp(t[v]) / z * (math.log(math.exp(t[v]) / z) - math.log(q[v])) for v in kept)
    assert float(top[0, 0]) == pytest.approx(hand, rel=1e-5)
    assert get_objective("forward_kl")(S_LOGITS, T_LOGITS, top_k=3)[0].tolist() == pytest.approx(d[0].tolist())


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 1.0])
def test_jsd_by_hand(beta):
    d = get_objective("jsd")(S_LOGITS, T_LOGITS, beta=beta)
    for pos in range(2):
        p, q = _probs(T_LOGITS[0, pos].tolist()), _probs(S_LOGITS[0, pos].tolist())
        m = [beta * a + (1 - beta) * b for a, b in zip(p, q)]
        # TRL's limits: beta = 0 is KL(teacher || student), beta = 1 KL(student || teacher)
        hand = _kl(p, q) if beta == 0 else _kl(q, p) if beta == 1 else beta * _kl(p, m) + (1 - beta) * _kl(q, m)
        assert float(d[0, pos]) == pytest.approx(hand, rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("beta", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_jsd_equals_trl_generalized_jsd_loss(beta):
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    gkd = pytest.importorskip("trl.experimental.gkd")
    gen = torch.Generator().manual_seed(0)
    student = torch.randn(3, 5, 11, generator=gen)
    teacher = torch.randn(3, 5, 11, generator=gen)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    labels = torch.where(mask.bool(), 1, -100)
    trl = gkd.GKDTrainer.generalized_jsd_loss(student, teacher, labels=labels, beta=beta)
    ours = masked_mean(get_objective("jsd")(student, teacher, beta=beta), mask)
    assert float(ours) == pytest.approx(float(trl), rel=1e-5, abs=1e-7)


def test_extra_terms_mix_into_the_policy_objective_before_aggregation():
    logps = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    extra = torch.tensor([[1.0, 3.0, 100.0], [3.0, 3.0, 3.0]])
    zero_adv = torch.zeros(2)
    loss, _ = policy_objective(LOSSES["ppo_clip"], logps, logps, zero_adv, mask, extra_terms=extra)
    assert float(loss) == pytest.approx((2.0 + 3.0) / 2)  # grpo: each sequence's token mean, then the mean
