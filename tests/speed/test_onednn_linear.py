"""oneDNN for generation's linear layers (speed/onednn_linear.py): taken only inside the block, only with grad
off, only on the thread that opened it, only for matrices big enough to gain; the same products to fp32
rounding; the model keeps its parameters, state dict and deep copies."""

from __future__ import annotations

import copy
import threading

import pytest
import torch
from torch import nn

from grouprl.speed import onednn_linear
from grouprl.speed.onednn_linear import MIN_WEIGHTS, OneDNNLinear, onednn_linears, use_onednn_layers

pytestmark = pytest.mark.skipif(onednn_linear._KERNEL is None, reason="this torch build has no oneDNN")


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(576, 1536), nn.SiLU(), nn.Linear(1536, 576, bias=False), nn.Linear(576, 64))


def kernels(fn) -> set[str]:
    """The operators ``fn`` ran, as the profiler saw them."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {event.key for event in prof.key_averages()}


def test_inside_the_block_no_grad_big_layers_run_onednn_and_agree_to_fp32_rounding():
    net, x = model(), torch.randn(3, 7, 576)
    with torch.no_grad():
        reference = net(x)
    with torch.no_grad(), onednn_linears(net):
        ours = net(x)
        ran = kernels(lambda: net(x))
    assert "mkldnn::_linear_pointwise" in ran
    assert all(type(m) is OneDNNLinear for m in net if isinstance(m, nn.Linear))
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-4)
    # the 576 -> 64 head is under MIN_WEIGHTS: still ATen's
    assert net[3].weight.numel() < MIN_WEIGHTS <= net[2].weight.numel()
    with torch.no_grad(), onednn_linears(net):
        assert "mkldnn::_linear_pointwise" not in kernels(lambda: net[3](x))


def test_grad_on_outside_the_block_or_disabled_it_is_atens_linear_bit_for_bit():
    net, x = model(), torch.randn(5, 576)
    use_onednn_layers(net)
    plain = nn.Sequential(*[copy.deepcopy(m) for m in net])
    for layer in plain:
        if isinstance(layer, nn.Linear):
            layer.__class__ = nn.Linear
    with torch.no_grad():
        expected = plain(x)
        assert torch.equal(net(x), expected)  # block closed
        with onednn_linears(net, enabled=False):
            assert torch.equal(net(x), expected)
            assert "mkldnn::_linear_pointwise" not in kernels(lambda: net(x))
    with onednn_linears(net):  # grad on: the training forward, and its backward, stay ATen's
        out = net(x)
        assert "mkldnn::_linear_pointwise" not in kernels(lambda: net(x))
    assert torch.equal(out, plain(x))
    out.sum().backward()
    assert net[0].weight.grad is not None


def test_only_the_thread_that_opened_the_block_takes_it():
    net, x = model(), torch.randn(4, 576)
    with torch.no_grad():
        expected = net(x)
    seen: dict[str, object] = {}

    def other_thread():
        with torch.no_grad():
            seen["out"] = net(x)

    with torch.no_grad(), onednn_linears(net):
        worker = threading.Thread(target=other_thread)
        seen["ops"] = kernels(lambda: (worker.start(), worker.join()))
    assert "mkldnn::_linear_pointwise" not in seen["ops"]
    assert torch.equal(seen["out"], expected)


def test_blocks_nest_and_the_model_keeps_its_state_dict_and_copies():
    net = model()
    keys = list(net.state_dict())
    with onednn_linears(net):
        with onednn_linears(net):
            pass
        assert onednn_linear._state.open == 1  # the outer block is still open
    assert onednn_linear._state.open == 0
    assert list(net.state_dict()) == keys
    twin = copy.deepcopy(net)
    assert type(twin[0]) is OneDNNLinear and twin[0].weight.data_ptr() != net[0].weight.data_ptr()
    x = torch.randn(2, 576)
    with torch.no_grad(), onednn_linears(twin):
        torch.testing.assert_close(twin(x), net(x), rtol=1e-5, atol=1e-4)


def test_an_error_inside_closes_the_block():
    net = model()
    with pytest.raises(ValueError):
        with onednn_linears(net):
            raise ValueError("boom")
    assert onednn_linear._state.open == 0


def test_a_layer_called_often_in_one_block_runs_on_a_packed_copy_with_the_same_products():
    net, x = model(), torch.randn(8, 576)
    with torch.no_grad(), onednn_linears(net):
        plain = [net(x) for _ in range(onednn_linear.PACK_AFTER_CALLS)]
        assert not onednn_linear._state.packed  # a generation this short never pays for a repack
        packed = [net(x) for _ in range(3)]
        held = set(onednn_linear._state.packed)
        assert held == {id(net[0]), id(net[2])}  # the 576 -> 64 layer is under MIN_WEIGHTS: never packed
        assert all(torch.equal(out, plain[0]) for out in plain + packed)  # oneDNN's blocked layout: the same sums
        net[0].weight.mul_(0.5)  # a weight pushed into the model mid-block: packed again, not served stale
        halved = net(x)
        net[0].weight.mul_(2.0)
    assert not onednn_linear._state.packed  # dropped when the block closes: the next update changes the weights
    with torch.no_grad():
        net[0].weight.mul_(0.5)
        expected = net(x)
    assert torch.allclose(halved, expected, rtol=1e-5, atol=1e-5)


def test_a_block_whose_cap_leaves_too_few_passes_never_repacks():
    net, x = model(), torch.randn(8, 576)
    after = onednn_linear.PACK_AFTER_CALLS
    with torch.no_grad(), onednn_linears(net, passes=2 * after - 1):  # at call after + 1, after - 2 passes are left
        for _ in range(2 * after - 1):
            net(x)
        assert not onednn_linear._state.packed
    with torch.no_grad(), onednn_linears(net, passes=2 * after + 1):
        for _ in range(after + 1):
            net(x)
        assert set(onednn_linear._state.packed) == {id(net[0]), id(net[2])}


def test_one_row_waits_for_its_own_longer_break_even():
    net, x = model(), torch.randn(1, 576)
    with torch.no_grad(), onednn_linears(net):
        for _ in range(onednn_linear.PACK_AFTER_CALLS_ONE_ROW):
            net(x)
        assert not onednn_linear._state.packed  # a lone row gains little a pass: 10 calls do not pay for a repack
        net(x)
        assert set(onednn_linear._state.packed) == {id(net[0]), id(net[2])}
