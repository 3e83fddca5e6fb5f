"""The loss registry and each built-in loss, aggregation, KL estimator and importance mode, on hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from grouprl.algos.loss import aggregate_loss, kl_penalty, micro_batch_weight
from grouprl.algos.entropy import EntropyBonus, entropy_bonus
from grouprl.algos.importance import sampling_correction
from grouprl.algos.loss import policy_loss, policy_objective
from grouprl.algos.policy_losses import LOSSES, get_loss

LOG = math.log


def one_token(ratio: float, advantage: float, name: str, **options):
    """The loss and d loss / d log pi of a single token with pi / pi_old = ratio."""
    logps = torch.tensor([[LOG(ratio) - 1.0]], requires_grad=True)
    old = torch.tensor([[-1.0]])
    loss = policy_objective(get_loss(name), logps, old, torch.tensor([advantage]), torch.ones(1, 1), options)[0]
    loss.backward()
    return float(loss.detach()), float(logps.grad)


def test_builtins_are_registered_with_their_options():
    assert {"ppo_clip", "two_sided_clip", "gspo", "gspo_token", "cispo", "sapo"} <= set(LOSSES)
    assert LOSSES["ppo_clip"].options == ("epsilon_low", "epsilon_high", "delta")
    assert LOSSES["cispo"].options == ("epsilon_max", "epsilon_min")
    for loss in LOSSES.values():  # each documents its equation and a paper
        doc = loss.fn.__doc__ or ""
        assert "=" in doc and "20" in doc, loss.name


@pytest.mark.parametrize(
    "ratio, adv, loss, grad",
    [
        (1.5, 1.0, -1.2, 0.0),  # clipped above: 1 + 0.2, no gradient
        (1.1, 1.0, -1.1, -1.1),  # inside: -rho A, d/dlogp = -rho A
        (0.5, -1.0, 0.8, 0.0),  # clipped below with A < 0
        (3.0, -1.0, 3.0, 3.0),  # A < 0, ratio high: min picks the unclipped -> unbounded without delta
    ],
)
def test_ppo_clip_hand_values(ratio, adv, loss, grad):
    got = one_token(ratio, adv, "ppo_clip")
    assert got == pytest.approx((loss, grad), abs=1e-6)


def test_clip_higher_and_two_sided_clip():
    assert one_token(1.25, 1.0, "ppo_clip", epsilon_high=0.28)[0] == pytest.approx(-1.25)  # inside 1.28
    # delta caps the unclipped term: -min(min(3, 2) * -1, 0.8 * -1) = 2, and no gradient past delta
    assert one_token(3.0, -1.0, "two_sided_clip", delta=2.0) == pytest.approx((2.0, 0.0), abs=1e-6)
    assert one_token(3.0, -1.0, "ppo_clip", delta=2.0) == pytest.approx((2.0, 0.0), abs=1e-6)


def test_gspo_uses_the_length_normalised_sequence_ratio():
    # token log-ratios 0.1 and 0.3 (mask 1, 1), a padded third token ignored: s = exp(0.2)
    old = torch.tensor([[-1.0, -2.0, -0.5]])
    logps = (old + torch.tensor([[0.1, 0.3, 5.0]])).requires_grad_(True)
    mask = torch.tensor([[1, 1, 0]])
    loss, stats = policy_objective(
        get_loss("gspo"), logps, old, torch.tensor([2.0]), mask, {"epsilon_low": 0.5, "epsilon_high": 0.5}, "grpo"
    )
    s = math.exp(0.2)
    assert float(loss) == pytest.approx(-s * 2.0, rel=1e-6)
    loss.backward()  # d(-s A)/d logp_t = -s A / |y| on each real token
    assert torch.allclose(logps.grad, torch.tensor([[-s, -s, 0.0]]), atol=1e-6)
    # with the paper's default range (3e-4 / 4e-4) s = 1.22 is clipped: no gradient
    logps.grad = None
    policy_objective(get_loss("gspo"), logps, old, torch.tensor([2.0]), mask, {}, "grpo")[0].backward()
    assert float(logps.grad.abs().sum()) == 0.0


def test_gspo_token_equals_gspo_for_sequence_advantages_and_weights_token_advantages():
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 4, generator=gen)
    logps = old + 0.01 * torch.randn(3, 4, generator=gen)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    adv = torch.tensor([1.0, -0.5, 2.0])
    grads = []
    for name in ("gspo", "gspo_token"):
        x = logps.clone().requires_grad_(True)
        value = policy_objective(get_loss(name), x, old, adv, mask, {"epsilon_low": 0.2, "epsilon_high": 0.2}, "dapo")[
            0
        ]
        value.backward()
        grads.append((float(value), x.grad))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-6)
    torch.testing.assert_close(grads[0][1], grads[1][1])
    # per-token advantages: each token's gradient is scaled by its own advantage
    x = logps.clone().requires_grad_(True)
    token_adv = torch.tensor([[1.0, 0.0, 1.0, 0.0]] * 3)
    policy_objective(
        get_loss("gspo_token"), x, old, token_adv, mask, {"epsilon_high": 0.2, "epsilon_low": 0.2}, "dapo"
    )[0].backward()
    assert float(x.grad[0, 1]) == 0.0 and float(x.grad[0, 0]) < 0


def test_cispo_keeps_the_gradient_of_clipped_tokens():
    # ratio 8 > epsilon_max 5: the weight is 5 (detached); l = -5 * A * log pi, gradient -5 A
    loss, grad = one_token(8.0, 1.0, "cispo")
    assert grad == pytest.approx(-5.0)
    assert loss == pytest.approx(-5.0 * (LOG(8.0) - 1.0))
    assert one_token(0.5, 1.0, "cispo", epsilon_min=0.8)[1] == pytest.approx(-0.8)


def test_sapo_gate():
    # l = -(4/tau) sigmoid(tau (rho - 1)) A; gradient -4 sigmoid' * rho * A (d rho / d logp = rho)
    for ratio, adv, tau in [(1.0, 1.0, 1.0), (1.6, 1.0, 1.0), (0.7, -2.0, 1.05)]:
        sig = 1 / (1 + math.exp(-tau * (ratio - 1)))
        loss, grad = one_token(ratio, adv, "sapo")
        assert loss == pytest.approx(-4 / tau * sig * adv, rel=1e-6)
        assert grad == pytest.approx(-4 * sig * (1 - sig) * ratio * adv, rel=1e-5)


def test_undeclared_option_is_an_error_naming_it():
    with pytest.raises(ValueError, match="loss 'gspo': unknown option 'epsilon'; it takes: epsilon_low"):
        one_token(1.0, 1.0, "gspo", epsilon=0.2)
    with pytest.raises(KeyError, match="unknown loss 'ppo'"):
        get_loss("ppo")


def test_a_loss_from_a_file(tmp_path):
    path = tmp_path / "my_loss.py"
    path.write_text(
        "def reinforce(logps, old_logps, advantages, mask, scale=1.0):\n"
        "    return -scale * advantages.unsqueeze(-1) * logps\n"
        "def bad(logps, advantages, **kwargs):\n    return logps\n"
    )
    loss = get_loss(f"{path}:reinforce")
    assert loss.options == ("scale",)
    assert one_token(2.0, 1.0, f"{path}:reinforce", scale=3.0)[1] == pytest.approx(-3.0)
    with pytest.raises(TypeError, match=r"loss '.*:bad': declare every option"):
        get_loss(f"{path}:bad")
    with pytest.raises(KeyError, match="no function 'missing'"):
        get_loss(f"{path}:missing")


def test_a_loss_returning_the_wrong_shape_is_named():
    loss = get_loss("ppo_clip").__class__("flat", lambda logps, old_logps, advantages, mask: logps.sum(), ())
    with pytest.raises(ValueError, match=r"loss 'flat': expected per-token terms of shape \(1, T\)"):
        loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1), torch.ones(1, 2))


def test_aggregations_on_hand_values():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert float(aggregate_loss(per_token, mask, "grpo")) == pytest.approx((2.0 + 4.0) / 2)
    assert float(aggregate_loss(per_token, mask, "bnpo")) == pytest.approx(10 / 4)
    assert float(aggregate_loss(per_token, mask, "dapo", num_items_in_batch=8)) == pytest.approx(10 / 8)
    assert float(aggregate_loss(per_token, mask, "dr_grpo", max_completion_length=5)) == pytest.approx(10 / 10)
    # a (B, 1) sequence term counts once per token
    assert float(aggregate_loss(torch.tensor([[1.0], [2.0]]), mask, "bnpo")) == pytest.approx(5 / 4)
    assert micro_batch_weight("bnpo", 3, 12, micro_batches=4) == 0.25
    assert micro_batch_weight("grpo", 3, 12) == 0.25 and micro_batch_weight("dapo", 3, 12) == 1.0
    with pytest.raises(ValueError, match="grpo, bnpo, dapo, dr_grpo"):
        aggregate_loss(per_token, mask, "seq_mean")


def test_kl_estimators():
    p, q = torch.tensor([LOG(0.5)]), torch.tensor([LOG(0.25)])  # log r = log(q/p) = log 0.5
    lr = LOG(0.5)
    assert float(kl_penalty(p, q, "k1")) == pytest.approx(-lr)
    assert float(kl_penalty(p, q, "k2")) == pytest.approx(0.5 * lr**2)
    assert float(kl_penalty(p, q, "k3")) == pytest.approx(0.5 - 1 - lr)
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_penalty(p, q, "k4")


def test_policy_loss_is_ppo_clip_with_k3():
    gen = torch.Generator().manual_seed(1)
    logps, old, ref = (-torch.rand(2, 3, generator=gen) for _ in range(3))
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 3)
    a = policy_loss(logps, old, adv, mask, "dapo", 0.1, 0.3, beta=0.1, ref_logps=ref)[0]
    b = policy_objective(
        get_loss("ppo_clip"),
        logps,
        old,
        adv,
        mask,
        {"epsilon_low": 0.1, "epsilon_high": 0.3},
        "dapo",
        beta=0.1,
        ref_logps=ref,
        kl_estimator="k3",
    )[0]
    assert float(a) == float(b)


def test_entropy_bonus_static_and_adaptive():
    h, mask = torch.tensor([[1.0, 3.0], [2.0, 9.0]]), torch.tensor([[1, 1], [1, 0]])
    assert float(entropy_bonus(h, mask, 0.1)) == pytest.approx(-0.1 * 6 / 3)
    assert float(entropy_bonus(h, mask, 0.1, total_tokens=6)) == pytest.approx(-0.1)
    bonus = EntropyBonus(coef=0.01, target=1.0, delta=0.01, coef_max=0.02)
    assert bonus.applied_coef() == 0.0  # no entropy seen yet (inf > target)
    bonus.update(0.5)  # below target: raised, and applied next step
    assert (bonus.coef, bonus.applied_coef()) == (0.02, 0.02)
    bonus.update(0.4)  # capped at coef_max
    assert bonus.coef == 0.02
    bonus.update(3.0)  # above: lowered, not applied
    assert bonus.coef == pytest.approx(0.01) and bonus.applied_coef() == 0.0
    restored = EntropyBonus(target=1.0)
    restored.load_state_dict(bonus.state_dict())
    assert (restored.coef, restored.last_entropy) == (bonus.coef, 3.0)
    static = EntropyBonus(coef=0.05)
    static.update(0.0)
    assert static.applied_coef() == 0.05


def test_importance_modes():
    old = torch.tensor([[LOG(0.5), LOG(0.2), LOG(0.9)], [LOG(0.3), 0.0, 0.0]])
    mu = torch.tensor([[LOG(0.25), LOG(0.4), LOG(0.1)], [LOG(0.6), 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    w, _ = sampling_correction("token_mask")(old, mu, mask, cap=3.0)  # ratios 2, 0.5, 9 | 0.5
    assert torch.allclose(w, torch.tensor([[2.0, 0.5, 0.0], [0.5, 1.0, 1.0]]), atol=1e-6)
    w, s = sampling_correction("sequence_truncate")(old, mu, mask, cap=3.0)  # products 9 | 0.5
    assert w.shape == (2, 1) and torch.allclose(w, torch.tensor([[3.0], [0.5]]), atol=1e-6)
    assert float(s["importance_sampling/sequence_ratio_max"]) == pytest.approx(9.0, rel=1e-5)
    w, s = sampling_correction("sequence_mask")(old, mu, mask, cap=3.0)
    assert torch.allclose(w, torch.tensor([[0.0], [0.5]]), atol=1e-6)
    assert float(s["importance_sampling/sequence_masked_fraction"]) == 0.5


def test_truncate_logits_keeps_what_top_k_and_top_p_keep():
    from grouprl.policy.logprobs import selective_log_softmax, truncate_logits

    probs = torch.tensor([[0.05, 0.5, 0.15, 0.3]])
    logits = probs.log()
    # top_p 0.9: the low tail 0.05 (<= 1 - 0.9) goes; 0.05 + 0.15 = 0.2 > 0.1 keeps 0.15
    cut = truncate_logits(logits, torch.tensor([1]), top_p=0.9)
    assert torch.isinf(cut[0, 0]) and torch.isfinite(cut[0, 1:]).all()
    assert float(selective_log_softmax(cut, torch.tensor([1]))) == pytest.approx(LOG(0.5 / 0.95), rel=1e-5)
    # top_k 2 keeps 0.5 and 0.3; then top_p 0.7 on the renormalised (0.625, 0.375) drops nothing more
    cut = truncate_logits(logits, torch.tensor([3]), top_k=2, top_p=0.7)
    assert torch.isinf(cut[0, [0, 2]]).all() and torch.isfinite(cut[0, [1, 3]]).all()
    # top_p 0.5 keeps the most likely alone, but the sampled token stays in (a boundary rounding)
    cut = truncate_logits(logits, torch.tensor([3]), top_p=0.5)
    assert torch.isfinite(cut[0, [1, 3]]).all() and torch.isinf(cut[0, [0, 2]]).all()
    assert truncate_logits(logits, torch.tensor([1])) is logits  # top_k 0, top_p 1: untouched
    tied = torch.tensor([[1.0, 2.0, 2.0, 0.0]])  # ties at the k-th value are kept, as vLLM keeps them
    assert torch.isfinite(truncate_logits(tied, torch.tensor([1]), top_k=1)[0, 1:3]).all()


def test_truncated_scoring_gradient_and_entropy_are_finite():
    from grouprl.policy.logprobs import scored_entropy, selective_log_softmax, truncate_logits

    logits = torch.randn(6, 11, generator=torch.Generator().manual_seed(0), requires_grad=True)
    ids = torch.arange(6)
    cut = truncate_logits(logits, ids, top_k=4, top_p=0.8)
    value = selective_log_softmax(cut, ids).sum() + scored_entropy(cut, "grad").sum()
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(logits.grad).all()
    assert (logits.grad[torch.isinf(cut)] == 0).all()  # no gradient to tokens outside the support
