"""policy/loading.own_trainable_memory: the trainable weights leave the checkpoint's memory map (the first
optimizer step would otherwise copy them page by page on write), the frozen ones stay mapped, tied weights
stay tied and nothing changes value. Read from the process's own memory map (Linux)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from grouprl.config import ModelConfig
from grouprl.models.loading import load_policy, own_trainable_memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")


def mapped_file(address: int) -> str | None:
    """The file behind the mapping that holds ``address`` (None: anonymous memory)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        low, high = (int(x, 16) for x in fields[0].split("-"))
        if low <= address < high:
            return fields[5] if len(fields) == 6 and fields[5].startswith("/") else None
    return None


def test_loaded_trainable_weights_are_copied_out_of_the_safetensors_map(tiny_arithmetic_dir):
    from transformers import AutoModelForCausalLM

    raw = AutoModelForCausalLM.from_pretrained(tiny_arithmetic_dir, dtype=torch.float32)
    before = {name: p.detach().clone() for name, p in raw.named_parameters()}
    mapped = [name for name, p in raw.named_parameters() if (mapped_file(p.data_ptr()) or "").endswith(".safetensors")]
    assert mapped, "this transformers maps safetensors weights: the case the copy exists for"

    raw.model.layers[0].mlp.requires_grad_(False)  # frozen: stays mapped
    frozen = {n for n, p in raw.named_parameters() if not p.requires_grad}
    copied = own_trainable_memory(raw)

    assert copied == sum(1 for p in raw.parameters() if p.requires_grad)
    for name, p in raw.named_parameters():
        where = mapped_file(p.data_ptr()) or ""
        if name in frozen and name in mapped:
            assert where.endswith(".safetensors"), name
        elif name not in frozen:
            assert not where.endswith(".safetensors"), f"{name} still in {where}"
        torch.testing.assert_close(p.detach(), before[name], rtol=0, atol=0)
    if raw.config.tie_word_embeddings:
        assert raw.get_output_embeddings().weight is raw.get_input_embeddings().weight


def test_load_policy_hands_over_a_model_whose_trainable_weights_are_its_own(tiny_arithmetic_dir):
    policy = load_policy(ModelConfig(), str(tiny_arithmetic_dir), torch.device("cpu"), need_reference=True)
    for name, p in policy.model.named_parameters():
        assert not (mapped_file(p.data_ptr()) or "").endswith(".safetensors"), name
    assert policy.reference is not None  # frozen: left where from_pretrained put it
    assert all(not p.requires_grad for p in policy.reference.parameters())
