"""After the final checkpoint the learner lets go of Adam's moments (the evaluation after RL runs without them)."""

from __future__ import annotations

import torch

from grouprl.models.loading import Policy
from grouprl.policy.scoring import pack
from grouprl.run_config import build_config
from grouprl.train.learner import Learner
from grouprl.train.step_samples import StepSamples
from tests.train.test_user_loss import tiny_model


def test_release_drops_the_moments_and_a_later_update_still_runs():
    cfg = build_config(None, {"device": "cpu", "grouped_scoring": False}, environ={})
    learner = Learner(cfg, Policy(model=tiny_model(), tokenizer=None, device=torch.device("cpu")))
    samples = StepSamples(pack([[3, 4], [3, 4]], [[5, 6, 7], [6, 7]], 0), torch.tensor([1.0, -1.0]))
    learner.update(samples)
    held = sum(t.numel() for s in learner.optimizer.state.values() for t in s.values() if torch.is_tensor(t))
    assert held >= 2 * sum(p.numel() for p in learner.model.parameters() if p.requires_grad)  # exp_avg, exp_avg_sq
    learner.release()
    assert not learner.optimizer.state
    assert all(p.grad is None for p in learner.model.parameters())
    assert learner.update(samples)["grad_norm"] > 0  # (a resumed or continued run rebuilds them)
