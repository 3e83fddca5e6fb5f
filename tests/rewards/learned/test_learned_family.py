"""A learned reward written in a file, named in a recipe, mixed with fixed rewards (examples/learned_rewards)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from grouprl.cli import main
from grouprl.config import ConfigError
from grouprl.records import Episode, Step
from grouprl.rewards.learned.mixer import LearnableMixer
from grouprl.rewards.scorer import Scorer

REPO = Path(__file__).resolve().parents[3]
NOVELTY = f"{REPO}/examples/learned_rewards/novelty.py:make_reward"


def episodes(answers: list[str]) -> list[Episode]:
    out = []
    for i, answer in enumerate(answers):
        ep = Episode(group_id=0, index_in_group=i, row={"question": "5+7", "ground_truth": "12"})
        ep.steps.append(
            Step(
                prompt_text="p",
                prompt_ids=[1],
                action_text=answer,
                action_ids=[2],
                truncated=False,
                anchor_state=None,
                messages=[{"role": "user", "content": "5+7"}],
            )
        )
        out.append(ep)
    return out


def test_named_in_rewards_it_learns_online_and_mixes_with_the_fixed_reward():
    scorer = Scorer(["arithmetic_exact", NOVELTY], [1.0, 0.5], reward_kwargs={NOVELTY: {"scale": 1.0}})
    assert scorer.keys == ["arithmetic_exact"] and [r.name for r in scorer.learned] == ["novelty"]
    assert scorer.learned_weights == pytest.approx([1 / 3])  # shares of 1 + 0.5, like any reward's weight
    first = episodes(["12", "12", "13"])
    scores = scorer.score(first)
    metrics = scores.metrics
    # Nothing seen yet: full bonus. R = 2/3 * exact + 1/3 * novelty.
    assert [v.score for v in scores.verdicts] == pytest.approx([2 / 3 + 1 / 3, 2 / 3 + 1 / 3, 1 / 3])
    assert metrics["novelty/distinct_answers"] == 2
    second = episodes(["12", "14"])
    v = scorer.score(second).verdicts  # "12" was given twice before: bonus 1/sqrt(3)
    assert v[0].parts["novelty"] == pytest.approx(1 / 3**0.5)
    assert v[1].parts["novelty"] == pytest.approx(1.0)
    # Frozen in evaluation: scored, never updated.
    state = scorer.state_dict()
    with scorer.eval_mode():
        scorer.score(episodes(["99", "99"]))
    assert scorer.state_dict() == state
    # The state round-trips (what learned_rewards.pt holds).
    fresh = Scorer(["arithmetic_exact", NOVELTY], [1.0, 0.5])
    fresh.load_state_dict(state)
    assert fresh.learned[0].counts == scorer.learned[0].counts


def test_a_factory_may_bring_its_mixer():
    scorer = Scorer(["arithmetic_exact", NOVELTY], [1.0, 1.0], reward_kwargs={NOVELTY: {"learnable_mix": True}})
    assert isinstance(scorer.mixer, LearnableMixer)
    eps = episodes(["12", "13"])
    metrics = scorer.score(eps).metrics
    assert "grail/alpha" in metrics and 0 < metrics["grail/alpha"] < 1


def test_a_factory_returning_something_else_is_one_line(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(
        "from grouprl.rewards.learned.model_rewards import learned_reward\n"
        "@learned_reward\ndef make(**options):\n    return 3\n"
    )
    with pytest.raises(ConfigError, match=r"the @learned_reward factory returned int; expected a LearnedReward"):
        Scorer([f"{path}:make"], [1.0])


def test_recipe_run_checkpoints_and_resumes_the_learned_state(tiny_arithmetic_dir, tmp_path):
    recipe = yaml.safe_load((REPO / "examples" / "learned_rewards" / "config_novelty.yaml").read_text())
    recipe["rewards"][1]["name"] = NOVELTY  # the example names it relative to the repository root
    recipe.update(
        {
            "max_steps": 2,
            "batch_size": 2,
            "num_generations": 4,
            "max_new_tokens": 4,
            "n_eval": 0,
            "n_train": 20,
            "save_steps": 1,
            "seed": 3,
            "output_dir": str(tmp_path / "run"),
        }
    )
    cfg = tmp_path / "novelty.yaml"
    cfg.write_text(yaml.safe_dump(recipe))
    assert main(["train", "--config", str(cfg), "--model_name_or_path", str(tiny_arithmetic_dir)]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all("novelty/distinct_answers" in r and "rewards/novelty/mean" in r for r in rows)
    saved = torch.load(tmp_path / "run" / "checkpoint-2" / "learned_rewards.pt", weights_only=False)
    counts = saved["learned_rewards"]["learned"]["novelty"]["counts"]
    assert sum(counts.values()) == 2 * 2 * 4  # two steps of 8 episodes, each counted once
    assert (
        main(
            [
                "train",
                "--config",
                str(cfg),
                "--model_name_or_path",
                str(tiny_arithmetic_dir),
                "--max_steps",
                "3",
                "--resume_from_checkpoint",
                str(tmp_path / "run" / "checkpoint-2"),
            ]
        )
        == 0
    )
    resumed = torch.load(tmp_path / "run" / "checkpoint-3" / "learned_rewards.pt", weights_only=False)
    assert sum(resumed["learned_rewards"]["learned"]["novelty"]["counts"].values()) == 3 * 2 * 4


def test_a_learned_reward_under_sandbox_user_rewards_is_refused_before_training(tiny_arithmetic_dir, tmp_path, capsys):
    """The sandbox never imports a reward file into the trainer, and a learned reward keeps and trains state
    there: the file is probed in the sandbox, and the run stops before training, in one line."""
    path = tmp_path / "learned.py"
    path.write_text(
        "from grouprl.rewards.learned.model_rewards import learned_reward\n"
        "@learned_reward\ndef make(**options):\n    raise AssertionError('never called')\n"
    )
    cfg = tmp_path / "r.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "rewards": ["arithmetic_exact", {"name": f"{path}:make", "weight": 0.5}],
                "sandbox_user_rewards": True,
                "n_eval": 0,
                "max_steps": 1,
                "output_dir": str(tmp_path / "run"),
            }
        )
    )
    code = main(["train", "--config", str(cfg), "--model_name_or_path", str(tiny_arithmetic_dir)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"reward '{path}:make'" in err[0] and "@learned_reward cannot run under sandbox_user_rewards: true" in err[0]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
