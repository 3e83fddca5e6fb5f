"""Samples with nothing to learn (every trained token's advantage 0) are left out of the update's forward and
backward, and the gradient is the whole batch's: same loss, same gradient norm, same weights after the step,
for every loss aggregation that allows it; bnpo, a KL term or an entropy bonus keep every sample."""

from __future__ import annotations

import pytest
import torch

from grouprl.models.loading import Policy
from grouprl.policy.scoring import TokenBatch, pack
from grouprl.run_config import build_config
from grouprl.train.learner import Learner
from grouprl.train.step_samples import StepSamples
from tests.train.test_zero_advantage import tiny_model

PROMPTS = [[3, 4, 5]] * 4 + [[6, 7]] * 4 + [[8, 9, 10, 11]] * 4
COMPLETIONS = [[5, 6, 7], [6, 7], [7, 8, 9, 10], [9], [2, 3], [3, 4, 5], [4], [5, 6, 7, 8], [6], [7, 8], [8, 9], [9]]
# group 0 solved by all, group 1 mixed, group 2 failed by all: only group 1's four samples train
ADVANTAGES = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.5, -0.5, -0.5, -0.5, 0.0, 0.0, 0.0, 0.0])


def run_update(overrides: dict, samples: StepSamples) -> tuple[dict[str, float], list[torch.Tensor], int]:
    """One update from the same weights: its statistics, the weights after it and the rows the model ran."""
    settings = {"device": "cpu", "gradient_accumulation_steps": 3, "learning_rate": 1e-3, **overrides}
    cfg = build_config(None, settings, environ={})
    model = tiny_model()
    rows: list[int] = []
    model.get_input_embeddings().register_forward_hook(lambda _m, inputs, _o: rows.append(inputs[0].size(0)))
    learner = Learner(cfg, Policy(model=model, tokenizer=None, device=torch.device("cpu")))
    stats = learner.update(samples)
    return stats, [p.detach().clone() for p in model.parameters()], sum(rows)


def assert_same_update(a: tuple, b: tuple) -> None:
    (stats_a, weights_a, _), (stats_b, weights_b, _) = a, b
    assert stats_a["loss"] == pytest.approx(stats_b["loss"], rel=1e-5, abs=1e-7)
    assert stats_a["grad_norm"] == pytest.approx(stats_b["grad_norm"], rel=1e-5)
    for wa, wb in zip(weights_a, weights_b):
        torch.testing.assert_close(wa, wb, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
@pytest.mark.parametrize("grouped", [True, False])
def test_left_out_samples_change_no_gradient(loss_type, grouped):
    samples = StepSamples(pack(PROMPTS, COMPLETIONS, 0), ADVANTAGES)
    base = {"loss_type": loss_type, "grouped_scoring": grouped}
    kept = run_update({**base, "skip_zero_advantage_samples": True}, samples)
    full = run_update({**base, "skip_zero_advantage_samples": False}, samples)
    assert kept[2] < full[2]  # the model ran on fewer rows
    assert_same_update(kept, full)
    assert full[1][0].ne(tiny_model().model.embed_tokens.weight).any()  # the update moved the weights


def test_token_level_advantages_of_conversations():
    """GiGPO's per-token advantages on conversations (tool results read, not trained): a row trains when any of
    its trained tokens has a non-zero advantage."""
    batch = pack(PROMPTS, COMPLETIONS, 0)
    attention = batch.completion_mask.clone()
    trained = attention.clone()
    trained[:, 0] = 0  # the first completion token read only (a tool result), never trained
    advantages = ADVANTAGES.unsqueeze(-1) * trained
    advantages[0, 0] = 3.0  # a non-zero advantage on an untrained token does not make row 0 train
    samples = StepSamples(
        TokenBatch(batch.prompt_ids, batch.prompt_mask, batch.completion_ids, trained, attention), advantages
    )
    kept = run_update({"loss_type": "dapo", "skip_zero_advantage_samples": True}, samples)
    full = run_update({"loss_type": "dapo", "skip_zero_advantage_samples": False}, samples)
    assert kept[2] < full[2]
    assert_same_update(kept, full)


@pytest.mark.parametrize(
    "overrides",
    [{"loss_type": "bnpo"}, {"loss_type": "dapo", "beta": 0.04}, {"loss_type": "dapo", "entropy_coef": 0.01}],
    ids=["bnpo", "kl", "entropy"],
)
def test_every_sample_runs_where_leaving_one_out_would_change_the_loss(overrides):
    samples = StepSamples(pack(PROMPTS, COMPLETIONS, 0), ADVANTAGES)
    kept = run_update({**overrides, "grouped_scoring": False, "skip_zero_advantage_samples": True}, samples)
    full = run_update({**overrides, "grouped_scoring": False, "skip_zero_advantage_samples": False}, samples)
    assert kept[2] == full[2]
    assert_same_update(kept, full)
