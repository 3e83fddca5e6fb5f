"""A user's loss (``loss: file.py:function``) that breaks the contract is one line naming the file and the
function, raised from a real update: wrong shape, wrong type, integer terms, no gradient, bad statistics."""

from __future__ import annotations

import textwrap

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from grouprl.config import ConfigError
from grouprl.models.loading import Policy
from grouprl.policy.scoring import pack
from grouprl.run_config import build_config
from grouprl.train.learner import Learner
from grouprl.train.step_samples import StepSamples
from grouprl.train.user_loss import UserLossError

LOSSES = textwrap.dedent("""
    import torch

    def good(logps, old_logps, advantages, mask, scale: float = 1.0):
        return -scale * advantages.unsqueeze(-1) * torch.exp(logps - old_logps)

    def per_sequence(logps, old_logps, advantages, mask):
        return -(advantages * logps.sum(-1))

    def a_number(logps, old_logps, advantages, mask):
        return 0.5

    def integers(logps, old_logps, advantages, mask):
        return torch.zeros_like(logps, dtype=torch.long)

    def detached(logps, old_logps, advantages, mask):
        return -advantages.unsqueeze(-1) * old_logps

    def bad_stats(logps, old_logps, advantages, mask):
        return -advantages.unsqueeze(-1) * logps, [1.0]
""")


def tiny_model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=16,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    return Qwen2ForCausalLM(cfg).float()


def update_with(tmp_path, fn: str):
    path = tmp_path / "my_losses.py"
    path.write_text(LOSSES)
    cfg = build_config(None, {"device": "cpu", "loss": f"{path}:{fn}", "grouped_scoring": False}, environ={})
    learner = Learner(cfg, Policy(model=tiny_model(), tokenizer=None, device=torch.device("cpu")))
    samples = StepSamples(pack([[3, 4], [3, 4]], [[5, 6, 7], [6, 7]], 0), torch.tensor([1.0, -1.0]))
    return learner.update(samples), str(path)


def test_a_good_user_loss_trains(tmp_path):
    stats, _ = update_with(tmp_path, "good")
    assert stats["grad_norm"] > 0


@pytest.mark.parametrize(
    "fn, said",
    [
        ("per_sequence", "returned a torch.float32 tensor of shape (2,); expected per-token terms (2, 3) or (2, 1)"),
        ("a_number", "returned float 0.5; expected a float tensor of per-token terms"),
        ("integers", "returned a torch.int64 tensor of shape (2, 3); expected a float tensor"),
        ("detached", "returned terms without a gradient"),
        ("bad_stats", "returned statistics as list"),
    ],
)
def test_a_broken_user_loss_is_one_line_naming_it(tmp_path, fn, said):
    with pytest.raises(UserLossError) as info:
        update_with(tmp_path, fn)
    message = str(info.value)
    assert isinstance(info.value, ConfigError)  # the CLI prints it as one line
    assert f"my_losses.py:{fn}'" in message and said in message and "\n" not in message
