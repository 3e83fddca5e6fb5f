"""Truncated importance weights (sampler != trainer) and their place in the loss: hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from grouprl.algos.importance import sampling_correction, token_truncated_weights
from grouprl.algos.loss import policy_loss


def test_weights_are_capped_ratios_on_masked_tokens():
    old = torch.tensor([[math.log(0.5), math.log(0.2), math.log(0.9)], [math.log(0.3), 0.0, 0.0]])
    mu = torch.tensor([[math.log(0.25), math.log(0.4), math.log(0.1)], [float("nan"), 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    w, s = token_truncated_weights(old, mu, mask, cap=2.0)
    # ratios 2.0, 0.5, 9.0 (-> capped at 2), NaN sampler log-prob -> 1 (no correction), padding -> 1
    assert torch.allclose(w, torch.tensor([[2.0, 0.5, 2.0], [1.0, 1.0, 1.0]]), atol=1e-6)
    assert float(s["importance_sampling/ratio_max"]) == pytest.approx(9.0, rel=1e-5)
    assert float(s["importance_sampling/ratio_min"]) == pytest.approx(0.5, rel=1e-5)
    assert float(s["importance_sampling/ratio_mean"]) == pytest.approx((2 + 0.5 + 9 + 1) / 4, rel=1e-5)
    assert float(s["importance_sampling/truncated_fraction"]) == pytest.approx(0.25)
    assert not w.requires_grad


def test_loss_weights_the_policy_term_only():
    logps = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv, mask = torch.tensor([1.5]), torch.ones(1, 2)
    w = torch.tensor([[2.0, 0.5]])
    loss, _ = policy_loss(logps, logps.detach(), adv, mask, loss_type="dapo", token_weights=w)
    loss.backward()
    # on-policy: ratio 1, l_t = -A w_t; dapo mean over 2 tokens; d l / d logp_t = -A w_t / 2
    assert float(loss) == pytest.approx(-1.5 * (2.0 + 0.5) / 2)
    assert torch.allclose(logps.grad, torch.tensor([[-1.5, -0.375]]))
    ref = torch.tensor([[-1.2, -2.0]])
    with_kl, _ = policy_loss(
        logps, logps.detach(), adv, mask, loss_type="dapo", beta=0.1, ref_logps=ref, token_weights=w
    )
    kl = math.exp(-0.2) + 0.2 - 1  # k3 on token 0; token 1 has none; not multiplied by w
    assert float(with_kl) == pytest.approx(float(loss) + 0.1 * kl / 2, rel=1e-6)


def test_unknown_correction_and_bad_cap_are_clear_errors():
    with pytest.raises(ValueError, match="token_truncate"):
        sampling_correction("sequence_magic")
    with pytest.raises(ValueError, match="cap must be > 0"):
        token_truncated_weights(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), cap=0)
