"""docs/grpo.md's objective menu: every registered loss and aggregation is in its table, and the
"your own loss" example is a loss the registry accepts and the objective runs."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from grouprl.algos.loss import AGGREGATIONS
from grouprl.algos.loss import policy_objective
from grouprl.algos.policy_losses import LOSSES, declare_loss

DOC = Path(__file__).resolve().parents[2] / "docs" / "grpo.md"


def test_every_loss_and_aggregation_is_documented():
    text = DOC.read_text()
    rows = set(re.findall(r"^\| `([a-z_]+)`", text, flags=re.MULTILINE))
    assert set(LOSSES) <= rows, set(LOSSES) - rows
    assert set(AGGREGATIONS) <= rows, set(AGGREGATIONS) - rows


def test_the_own_loss_example_runs():
    (code,) = re.findall(r"### Your own loss\n\n```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    namespace: dict = {}
    exec(compile(code, "docs/grpo.md", "exec"), namespace)
    loss = declare_loss("reinforce", namespace["reinforce"])
    assert loss.options == ("scale",)
    logps = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    value, stats = policy_objective(
        loss, logps, logps.detach(), torch.tensor([1.0]), torch.ones(1, 2), {"scale": 2.0}, "grpo"
    )
    value.backward()
    assert float(value) == 3.0 and float(stats["reinforce/scale"]) == 2.0
    assert logps.grad.tolist() == [[-1.0, -1.0]]
