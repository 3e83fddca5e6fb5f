"""Resume with a changed learning rate (or weight decay, beta2, schedule): the config's value is used,
and one line per changed key says so. The moments and the step count stay the checkpoint's."""

from __future__ import annotations

import logging

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grouprl.models.loading import Policy
from grouprl.run_config import build_config
from grouprl.train.checkpoint import load_training_state, save_checkpoint
from grouprl.train.learner import Learner
from grouprl.train.parallel import SINGLE


def learner(model_dir, **cli) -> Learner:
    cfg = build_config(None, {"device": "cpu", "max_steps": 10, "lr_scheduler_type": "linear", **cli}, environ={})
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return Learner(cfg, Policy(model=model, tokenizer=None, device=torch.device("cpu")))


def trained_checkpoint(model_dir, out, **cli):
    first = learner(model_dir, **cli)
    for _ in range(3):
        ids = torch.tensor([[1, 2, 3, 4]])
        first.model(ids, labels=ids).loss.backward()
        first.optimizer.step()
        first.scheduler.step()
        first.optimizer.zero_grad()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return first, save_checkpoint(
        out, 3, first.model, tokenizer, first.optimizer, first.scheduler, {"data_position": 0, "extra": {}}
    )


def test_a_changed_learning_rate_wins_and_is_said(tiny_arithmetic_dir, tmp_path, caplog):
    first, ckpt = trained_checkpoint(tiny_arithmetic_dir, tmp_path, learning_rate=1e-3)
    resumed = learner(tiny_arithmetic_dir, learning_rate=4e-3)
    with caplog.at_level(logging.WARNING):
        load_training_state(ckpt, resumed, None, SINGLE)
    # linear decay over 10 steps, 3 taken: the new base rate x 7/10 (today: the checkpoint's 1e-3 x 7/10)
    assert resumed.learning_rate == pytest.approx(4e-3 * 0.7)
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(4e-3 * 0.7)
    assert resumed.scheduler.last_epoch == 3
    state = resumed.optimizer.state[resumed.optimizer.param_groups[0]["params"][0]]
    old = first.optimizer.state[first.optimizer.param_groups[0]["params"][0]]
    assert torch.equal(state["exp_avg"], old["exp_avg"])  # the moments are the checkpoint's
    lines = [r.getMessage() for r in caplog.records if "resume from" in r.getMessage()]
    assert len(lines) == 1 and "learning_rate was 0.001" in lines[0] and "0.004" in lines[0]
    resumed.scheduler.step()
    assert resumed.learning_rate == pytest.approx(4e-3 * 0.6)  # and the schedule goes on from there


def test_every_changed_setting_has_its_line(tiny_arithmetic_dir, tmp_path, caplog):
    _, ckpt = trained_checkpoint(tiny_arithmetic_dir, tmp_path, weight_decay=0.0, warmup_steps=0)
    resumed = learner(
        tiny_arithmetic_dir, weight_decay=0.1, adam_beta2=0.99, warmup_steps=2, max_steps=20, lr_scheduler_type="cosine"
    )
    with caplog.at_level(logging.WARNING):
        load_training_state(ckpt, resumed, None, SINGLE)
    said = " | ".join(r.getMessage() for r in caplog.records)
    for key in ("weight_decay", "adam_beta2", "warmup_steps", "optimizer_steps", "lr_scheduler_type"):
        assert f"{key} was" in said, key
    assert "learning_rate was" not in said  # unchanged: no line
    group = resumed.optimizer.param_groups[0]
    assert group["weight_decay"] == 0.1 and group["betas"][1] == 0.99


def test_an_unchanged_resume_says_nothing(tiny_arithmetic_dir, tmp_path, caplog):
    _, ckpt = trained_checkpoint(tiny_arithmetic_dir, tmp_path, learning_rate=1e-3)
    resumed = learner(tiny_arithmetic_dir, learning_rate=1e-3)
    with caplog.at_level(logging.WARNING):
        load_training_state(ckpt, resumed, None, SINGLE)
    assert not [r for r in caplog.records if "resume from" in r.getMessage()]
    assert resumed.learning_rate == pytest.approx(1e-3 * 0.7)
