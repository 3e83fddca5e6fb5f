"""An update whose advantages are all zero is skipped: the weights stay (AdamW's momentum would move
them), the schedule advances as if it had run, and a KL or entropy term still gets its update."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from grouprl.models.loading import Policy
from grouprl.policy.scoring import pack
from grouprl.run_config import build_config
from grouprl.train.learner import Learner
from grouprl.train.step_samples import StepSamples
from grouprl.train.zero_advantage import nothing_to_learn


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


def samples(adv: list[float]) -> StepSamples:
    prompts = [[3, 4, 5]] * len(adv)
    actions = [[6, 7, 8, 9], [7, 8]] * (len(adv) // 2)
    return StepSamples(pack(prompts, actions, 0), torch.tensor(adv))


def learner(**cli) -> Learner:
    cfg = build_config(
        None,
        {
            "device": "cpu",
            "learning_rate": 0.05,
            "weight_decay": 0.1,
            "max_steps": 10,
            "warmup_steps": 0,
            "lr_scheduler_type": "linear",
            "grouped_scoring": False,
            **cli,
        },
        environ={},
    )
    return Learner(cfg, Policy(model=tiny_model(), tokenizer=None, device=torch.device("cpu")))


def weights(lr: Learner) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in lr.model.parameters()])


def test_zero_advantages_after_a_real_step_leave_the_weights_and_advance_the_schedule():
    lr = learner()
    lr.update(samples([1.0, -1.0]))  # a real step: AdamW now has momentum
    before, lr_before = weights(lr), lr.learning_rate
    stats = lr.update(samples([0.0, 0.0]))
    assert torch.equal(weights(lr), before)  # today's code moves them on momentum and weight decay
    assert stats["skipped_zero_advantage"] == 1.0 and stats["grad_norm"] == 0.0
    assert lr.learning_rate < lr_before  # the schedule advanced: a later step's lr is the planned one
    assert lr.scheduler.last_epoch == 2


@pytest.mark.parametrize("cli", [{"beta": 0.1}, {"entropy_coef": 0.01}])
def test_a_kl_or_entropy_term_still_updates(cli):
    lr = learner(**cli)
    lr.update(samples([1.0, -1.0]))
    before = weights(lr)
    stats = lr.update(samples([0.0, 0.0]))
    assert "skipped_zero_advantage" not in stats
    assert not torch.equal(weights(lr), before)


def test_the_skip_can_be_turned_off_to_step_as_trl_does():
    lr = learner(skip_zero_advantage_updates=False)
    lr.update(samples([1.0, -1.0]))
    before = weights(lr)
    stats = lr.update(samples([0.0, 0.0]))
    assert "skipped_zero_advantage" not in stats
    assert not torch.equal(weights(lr), before)  # AdamW's momentum and weight decay moved them


def test_the_rule():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    kw = {"beta": 0.0, "entropy_bonus": False, "loss_name": "ppo_clip"}
    assert nothing_to_learn(torch.zeros(2), mask, **kw)
    assert not nothing_to_learn(torch.tensor([0.0, 1e-9]), mask, **kw)
    assert not nothing_to_learn(torch.tensor([0.0, float("nan")]), mask, **kw)
    per_token = torch.tensor([[0.0, 0.0, 5.0], [0.0, 0.0, 0.0]])  # non-zero only where nothing is trained
    assert nothing_to_learn(per_token, mask, **kw)
    assert not nothing_to_learn(torch.zeros(2), mask, **{**kw, "loss_name": "mine.py:loss"})  # may not use A
