"""Every built-in loss trains the tiny arithmetic model; a loss from a file trains through the CLI;
dynamic sampling, the curriculum and the adaptive entropy bonus resume exactly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grouprl.algos.policy_losses import LOSSES
from grouprl.cli import main
from grouprl.run_config import build_config

TIMING = {"step_time", "generation_time", "score_time", "advantage_time", "update_time", "tokens_per_second"}


def two_steps(model_dir: Path, out: Path, keys: dict) -> tuple[list[dict], float]:
    """Two training steps (each batch used twice, so ratios leave 1); the metrics and how far the weights moved."""
    from grouprl.models.loading import load_policy
    from grouprl.tasks import load_task
    from grouprl.train.trainer import Trainer

    cfg = build_config(
        None,
        {
            "output_dir": str(out),
            "batch_size": 2,
            "num_generations": 4,
            "max_new_tokens": 4,
            "num_iterations": 2,
            "learning_rate": 3e-3,
            "n_eval": 0,
            "n_train": 40,
            "seed": 1,
            "device": "cpu",
            **keys,
        },
        environ={},
    )
    torch.manual_seed(1)
    policy = load_policy(cfg.model, str(model_dir), torch.device("cpu"), need_reference=False)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    trainer = Trainer(cfg, policy, load_task(cfg))
    metrics = []
    for _ in range(2):
        record = trainer.train_step()
        trainer.step += 1
        metrics.append(trainer.metrics(record))
    moved = max(float((p.detach() - before[n]).abs().max()) for n, p in policy.model.named_parameters())
    return metrics, moved


@pytest.mark.parametrize(
    "keys",
    [{"loss": name} for name in sorted(LOSSES)]
    + [
        {
            "loss": "ppo_clip",
            "entropy_coef": 0.01,
            "entropy_target": 5.0,
        },  # adaptive, below target: applied from step 2
        {"loss": "cispo", "loss_type": "bnpo", "beta": 0.02, "kl_estimator": "k2"},
    ],
    ids=lambda keys: "-".join(str(v) for v in keys.values()),
)
def test_builtin_loss_trains_two_steps(keys, warm_arithmetic_dir, tmp_path):
    metrics, moved = two_steps(warm_arithmetic_dir, tmp_path, keys)
    assert moved > 1e-5, "the weights did not move"
    for m in metrics:
        assert all(v == v and abs(v) != float("inf") for v in m.values() if isinstance(v, float)), m
        assert m["skipped_updates"] == 0.0
    if "entropy_target" in keys:  # two updates a step; c not applied before any entropy is seen, then raised
        assert [m["entropy_coef"] for m in metrics] == pytest.approx([(0 + 0.015) / 2, (0.02 + 0.025) / 2])
    if keys.get("beta"):
        assert metrics[-1]["kl"] > 0


def cli_train(model_dir: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "train",
            "--model_name_or_path",
            str(model_dir),
            "--output_dir",
            str(out),
            "--batch_size",
            "2",
            "--num_generations",
            "4",
            "--max_new_tokens",
            "4",
            "--n_eval",
            "0",
            "--n_train",
            "40",
            "--device",
            "cpu",
            "--seed",
            "3",
            *extra,
        ]
    )


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


USER_LOSS = '''
import torch

def reinforce(logps, old_logps, advantages, mask, scale=1.0):
    """Plain REINFORCE: l_t = -scale * A * log pi(y_t) (Williams, 1992)."""
    return -scale * advantages.unsqueeze(-1) * logps, {"reinforce/scale": torch.tensor(scale)}
'''


def test_a_loss_from_a_file_trains_two_steps(warm_arithmetic_dir, tmp_path, capsys):
    path = tmp_path / "my_loss.py"
    path.write_text(USER_LOSS)
    out = tmp_path / "run"
    assert (
        cli_train(
            warm_arithmetic_dir,
            out,
            "--max_steps",
            "2",
            "--loss",
            f"{path}:reinforce",
            "--loss_options",
            "{scale: 2.0}",
        )
        == 0
    )
    logged = rows(out / "metrics.jsonl")
    assert [m["step"] for m in logged] == [1, 2] and all(m["reinforce/scale"] == 2.0 for m in logged)
    assert (
        cli_train(
            warm_arithmetic_dir,
            tmp_path / "bad",
            "--max_steps",
            "1",
            "--loss",
            f"{path}:reinforce",
            "--loss_options",
            "{scael: 2.0}",
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert any("unknown option 'scael'" in line and "it takes: scale" in line for line in err), err


def metric_rows(path: Path) -> dict[int, dict]:
    return {r["step"]: {k: v for k, v in r.items() if k not in TIMING} for r in rows(path)}


def test_dynamic_sampling_curriculum_and_adaptive_entropy_resume_exactly(warm_arithmetic_dir, tmp_path):
    keys = (
        "--max_steps",
        "4",
        "--num_iterations",
        "2",
        "--learning_rate",
        "1e-3",
        "--entropy_coef",
        "0.01",
        "--entropy_target",
        "5.0",
        "--dynamic_sampling",
        "{metric: judge, max_batches: 3}",
        "--curriculum",
        "{skip_steps: 2}",
    )
    full, part = tmp_path / "full", tmp_path / "part"
    assert cli_train(warm_arithmetic_dir, full, *keys) == 0
    assert cli_train(warm_arithmetic_dir, part, *keys, "--save_steps", "2") == 0
    shutil.rmtree(part / "checkpoint-4")  # what a kill right after checkpoint-2 leaves
    lines = (part / "metrics.jsonl").read_text().splitlines(keepends=True)
    (part / "metrics.jsonl").write_text("".join(lines[:2]))
    state = json.loads((part / "checkpoint-2" / "trainer_state.json").read_text())
    assert set(state["objective"]) == {"entropy_bonus", "curriculum"}
    assert cli_train(warm_arithmetic_dir, part, *keys, "--resume_from_checkpoint", str(part / "checkpoint-2")) == 0

    want, got = metric_rows(full / "metrics.jsonl"), metric_rows(part / "metrics.jsonl")
    assert set(got) == {1, 2, 3, 4}
    for step in (3, 4):
        assert got[step].keys() == want[step].keys()
        for key, value in want[step].items():
            assert got[step][key] == value or abs(got[step][key] - value) < 1e-6, (step, key)
    # the three were at work: extra rounds or dropped groups, skipped prompts, an applied coefficient
    assert sum(want[s]["dynamic_sampling/groups_dropped"] for s in want) > 0
    assert max(want[s]["dynamic_sampling/batches"] for s in want) >= 1
    assert want[4]["curriculum/skipped_draws"] >= 0 and want[4]["entropy_coef"] > 0
    a = load_file(full / "checkpoint-4" / "model.safetensors")
    b = load_file(part / "checkpoint-4" / "model.safetensors")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-6
