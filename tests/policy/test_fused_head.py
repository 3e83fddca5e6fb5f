"""The fused LM head (policy/fused_head.py): the same log-probs bit for bit as the head, log-softmax and pick run
through autograd, gradients to fp32 rounding, whether its chunks' logits are kept or made again for the backward;
on the real model through both scorers; and it steps aside where it would not compute the same thing."""

from __future__ import annotations

import pytest
import torch

import grouprl.policy.lm_head as lm_head
from grouprl.policy.fused_head import fused_head_scores
from grouprl.policy.logprobs import entropy_from_logits, selective_log_softmax
from grouprl.speed.onednn_linear import use_onednn_layers
from real_model import smollm2_dir  # noqa: F401 - the session fixture
from test_lm_head import batch_of, real, run, whole_logits  # noqa: F401 - real is the module fixture


def autograd_reference(hidden, head, targets, temperature, chunk):
    """What the checkpointed path computes: head, log-softmax and pick through autograd, the same row chunks."""
    parts = [head(h) / temperature for h in hidden.split(chunk)]
    logits = torch.cat(parts)
    return selective_log_softmax(logits, targets), entropy_from_logits(logits)


@pytest.mark.parametrize("keep", [False, True], ids=["made_again", "kept"])
@pytest.mark.parametrize("temperature,bias", [(1.0, False), (0.7, True)])
def test_fused_head_equals_autograd(keep, temperature, bias):
    torch.manual_seed(0)
    head = torch.nn.Linear(24, 301, bias=bias)
    hidden = torch.randn(23, 24, requires_grad=True)
    targets = torch.randint(0, 301, (23,))
    upstream = torch.randn(23)

    ref_logp, ref_entropy = autograd_reference(hidden, head, targets, temperature, 5)
    (ref_logp * upstream).sum().backward()
    ref = [hidden.grad.clone(), head.weight.grad.clone()] + ([head.bias.grad.clone()] if bias else [])
    hidden.grad = None
    head.zero_grad(set_to_none=True)

    logp, entropy = fused_head_scores(hidden, head, targets, temperature, True, chunk=5, keep=keep)  # a short last
    assert torch.equal(logp.detach(), ref_logp.detach())  # the same matmul, logsumexp and pick
    assert torch.allclose(entropy, ref_entropy, atol=1e-5)
    assert not entropy.requires_grad
    (logp * upstream).sum().backward()
    got = [hidden.grad, head.weight.grad] + ([head.bias.grad] if bias else [])
    for name, g, r in zip(["hidden", "weight", "bias"], got, ref):
        assert torch.allclose(g, r, atol=1e-6, rtol=1e-5), f"{name}: {float((g - r).abs().max()):.2e}"


def test_a_second_backward_makes_the_logits_again():
    torch.manual_seed(1)
    head = torch.nn.Linear(8, 50, bias=False)
    hidden = torch.randn(7, 8, requires_grad=True)
    targets = torch.randint(0, 50, (7,))
    logp, _ = fused_head_scores(hidden, head, targets, 1.0, False, chunk=3, keep=True)
    logp.sum().backward(retain_graph=True)
    first = hidden.grad.clone()
    hidden.grad = None
    logp.sum().backward()  # the kept softmax went into the first backward: this one makes the logits again
    assert torch.allclose(hidden.grad, first, atol=1e-6)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_real_model_scores_through_the_fused_head(real, monkeypatch, temperature):
    """SmolLM2's tied 49k head, padded and grouped: log-probs, entropies and every parameter's gradient as the
    whole-logits path gives them (the entropy a metric: the path the update takes without an entropy bonus)."""
    from grouprl.policy.grouped_scoring import grouped_completion_logps
    from grouprl.policy.scoring import completion_logps

    model, tok = real
    monkeypatch.setattr(lm_head, "LM_HEAD_CHUNK", 5)
    calls = []
    original = lm_head.fused_head_scores
    monkeypatch.setattr(lm_head, "fused_head_scores", lambda *a, **k: calls.append(1) or original(*a, **k))
    batch = batch_of(tok)
    mask = batch.completion_mask.bool()
    weights = torch.linspace(-1.0, 1.0, batch.completion_mask.numel()).view_as(batch.completion_mask)
    kw = dict(temperature=temperature, with_entropy=True, support=None)
    ref_logps, ref_entropy, ref_grads = run(model, whole_logits, batch, weights, **kw)
    scale = max(float(g.abs().max()) for g in ref_grads.values() if g is not None)
    for scorer in (completion_logps, grouped_completion_logps):
        calls.clear()
        logps, entropy, grads = run(model, scorer, batch, weights, **kw)
        assert calls, f"{scorer.__name__} did not take the fused head"
        assert bool(((logps - ref_logps).abs() <= 3e-5 + 1e-6 * ref_logps.abs())[mask].all()), scorer.__name__
        assert bool(((entropy - ref_entropy).abs() <= 2e-5 + 1e-6 * ref_entropy.abs())[mask].all()), scorer.__name__
        worst = max(float((grads[n] - g).abs().max()) for n, g in ref_grads.items() if g is not None) / scale
        assert worst < 1e-5, f"{scorer.__name__}: gradients differ by {worst:.2e} of their scale"


def test_the_fused_head_steps_aside_where_it_would_compute_something_else(monkeypatch):
    taken = []
    monkeypatch.setattr(lm_head, "fused_head_scores", lambda *a, **k: taken.append(1) or (None, None))
    hidden, targets = torch.randn(4, 6), torch.randint(0, 9, (4,))
    plain = torch.nn.Linear(6, 9)
    lm_head.head_scores(hidden, plain, targets)
    use_onednn_layers(torch.nn.Sequential(plain))  # what generation leaves the model's linears as: still taken
    lm_head.head_scores(hidden, plain, targets)
    assert taken == [1, 1]
    lm_head.head_scores(hidden, plain, targets, with_entropy="grad")  # an entropy bonus needs its gradient
    lm_head.head_scores(hidden, plain, targets, support=(3, 0.9))  # top-k/top-p renormalises the logits
    hooked = torch.nn.Linear(6, 9)
    hooked.register_forward_hook(lambda *a: None)  # a hook (DDP-like wrappers, probes) must see the head's call
    lm_head.head_scores(hidden, hooked, targets)

    class Wrapped(torch.nn.Linear):  # a LoRA or quantised layer subclassing Linear computes something else
        pass

    lm_head.head_scores(hidden, Wrapped(6, 9), targets)
    assert taken == [1, 1]
