"""policy/cuda_attention: a policy loaded onto a CUDA device sets torch's process-wide cuDNN-attention switch from
``model.cudnn_attention`` (off by default); on any other device the switch is left alone. CI has no GPU: the
switch itself is torch's flag, which a CPU build holds too, so the tests read it; what the setting does to a
GPU's decode loop was measured on an H100 (docs/performance.md, "cuDNN attention on CUDA")."""

from __future__ import annotations

import pytest
import torch

from grouprl.config import ModelConfig
from grouprl.speed.cuda_attention import choose_cudnn_attention
from grouprl.models.loading import load_policy
from grouprl.run_config import build_config


@pytest.fixture()
def restore_cudnn_flag():
    before = torch.backends.cuda.cudnn_sdp_enabled()
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


@pytest.mark.parametrize("enabled", [False, True])
def test_a_cuda_device_sets_the_switch(restore_cudnn_flag, enabled):
    torch.backends.cuda.enable_cudnn_sdp(not enabled)
    choose_cudnn_attention(torch.device("cuda"), enabled)
    assert torch.backends.cuda.cudnn_sdp_enabled() is enabled
    choose_cudnn_attention(torch.device("cuda:1"), not enabled)  # any CUDA index
    assert torch.backends.cuda.cudnn_sdp_enabled() is (not enabled)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_other_devices_leave_the_switch_alone(restore_cudnn_flag, device):
    for state in (True, False):
        torch.backends.cuda.enable_cudnn_sdp(state)
        choose_cudnn_attention(torch.device(device), not state)
        assert torch.backends.cuda.cudnn_sdp_enabled() is state


def test_the_setting_is_off_by_default_and_reaches_the_config(tmp_path):
    assert ModelConfig().cudnn_attention is False
    cfg = build_config(cli={"output_dir": str(tmp_path), "cudnn_attention": True}, environ={})
    assert cfg.model.cudnn_attention is True


def test_loading_on_cpu_keeps_torchs_setting(restore_cudnn_flag, tiny_arithmetic_dir):
    torch.backends.cuda.enable_cudnn_sdp(True)
    load_policy(ModelConfig(torch_dtype="float32"), tiny_arithmetic_dir, torch.device("cpu"), need_reference=False)
    assert torch.backends.cuda.cudnn_sdp_enabled() is True


def test_load_policy_hands_the_setting_to_the_switch(monkeypatch, tiny_arithmetic_dir):
    import grouprl.models.loading as loading

    seen = []
    monkeypatch.setattr(loading, "choose_cudnn_attention", lambda device, enabled: seen.append((device.type, enabled)))
    for enabled in (True, False):
        loading.load_policy(
            ModelConfig(torch_dtype="float32", cudnn_attention=enabled),
            tiny_arithmetic_dir,
            torch.device("cpu"),
            need_reference=False,
        )
    assert seen == [("cpu", True), ("cpu", False)]
