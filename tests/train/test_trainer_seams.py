"""The seams of the loop: user estimators from a file, declared estimator options, learned rewards
in the scorer (eval mode, checkpoint and resume), generation backends, tasks with their own config."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
from pydantic import Field

from grouprl.algos.advantages import get_estimator, run_estimator
from grouprl.cli import main
from grouprl.config import ConfigError
from grouprl.run_config import build_config

ESTIMATOR = textwrap.dedent('''
    import torch

    def sign_advantage(scores, group_ids, margin: float = 0.0):
        """+1 above the group mean (by more than margin), -1 below it, 0 otherwise."""
        mean = torch.zeros(int(group_ids.max()) + 1, dtype=scores.dtype).index_add_(0, group_ids, scores)
        mean = mean / torch.bincount(group_ids)
        centred = scores - mean[group_ids]
        return torch.where(centred > margin, 1.0, torch.where(centred < -margin, -1.0, 0.0))
''')


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_user_estimator_from_a_file_trains_two_steps(warm_arithmetic_dir, tmp_path):
    path = tmp_path / "my_estimator.py"
    path.write_text(ESTIMATOR)
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--model_name_or_path",
                str(warm_arithmetic_dir),
                "--output_dir",
                str(out),
                "--advantage",
                f"{path}:sign_advantage",
                "--advantage_options",
                "{margin: 0.01}",
                "--max_steps",
                "2",
                "--batch_size",
                "2",
                "--num_generations",
                "4",
                "--n_eval",
                "0",
            ]
        )
        == 0
    )
    assert [m["step"] for m in _rows(out / "metrics.jsonl")] == [1, 2]
    rollouts = _rows(out / "rollouts" / "rollouts.jsonl")
    assert len(rollouts) == 2 * 2 * 4 and {r["advantage"] for r in rollouts} <= {-1.0, 0.0, 1.0}
    for step in (1, 2):  # the file's rule, applied per group
        for group in (0, 1):
            rs = [r for r in rollouts if r["step"] == step and r["group"] == group]
            mean = sum(r["reward"] for r in rs) / len(rs)
            assert [r["advantage"] for r in rs] == [
                1.0 if r["reward"] - mean > 0.01 else -1.0 if r["reward"] - mean < -0.01 else 0.0 for r in rs
            ]


def test_unknown_estimator_option_is_rejected_by_name(warm_arithmetic_dir, tmp_path, capsys):
    scores, groups = torch.tensor([1.0, 0.0]), torch.tensor([0, 0])
    with pytest.raises(ValueError, match="advantage estimator 'grpo': unknown option 'scael'"):
        run_estimator(get_estimator("grpo"), scores, groups, scael="group")
    with pytest.raises(ValueError, match="'rloo': unknown option 'gamma'"):
        run_estimator(get_estimator("rloo"), scores, groups, gamma=0.9)
    code = main(
        [
            "train",
            "--model_name_or_path",
            str(warm_arithmetic_dir),
            "--output_dir",
            str(tmp_path / "r"),
            "--advantage_options",
            "{epsilonn: 0.1}",
            "--max_steps",
            "1",
            "--n_eval",
            "0",
        ]
    )
    assert code == 2 and "unknown option 'epsilonn'" in capsys.readouterr().err


class CountingLength:
    """A trivial learned reward: scores an episode by its completion length times a learned scale,
    and on every (unfrozen) update raises the scale by 1."""

    name = "length_model"

    def __init__(self):
        self.frozen, self.scale, self.updates = False, 1.0, 0

    def score(self, episodes):
        return [self.scale * len(ep.steps[-1].action_text) for ep in episodes]

    def update(self, episodes):
        if self.frozen:
            return {}
        self.scale += 1.0
        self.updates += 1
        return {"length_model/scale": self.scale}

    def state_dict(self):
        return {"scale": torch.tensor(self.scale), "updates": self.updates}

    def load_state_dict(self, state):
        self.scale, self.updates = float(state["scale"]), state["updates"]


def test_step_level_estimator_may_return_a_record_with_only_the_advantage():
    """A user's step-level estimator returning a record of parts: the parts it leaves out (returns,
    A_E, A_S, anchor sizes) take their plain defaults instead of failing."""
    from types import SimpleNamespace

    from grouprl.algos.advantages import Estimator
    from grouprl.records import Episode, Step
    from grouprl.train.advantages import compute_advantage_record

    def step_value(scores, group_ids, steps):
        return SimpleNamespace(advantage=steps.rewards * 2)

    eps = [
        Episode(
            group_id=0,
            index_in_group=k,
            row={},
            steps=[
                Step(prompt_text="", prompt_ids=[], action_text="a", action_ids=[], truncated=False, anchor_state=t)
                for t in range(2)
            ],
        )
        for k in range(2)
    ]
    step_rewards = [[float(k + t) for t in range(2)] for k in range(2)]
    cfg = build_config(None, {"gamma": 0.5}, environ={})
    estimator = Estimator("mine", step_value, step_level=True, options=())
    rec = compute_advantage_record(eps, torch.tensor([1.0, 3.0]), step_rewards, cfg.algorithm, estimator, {})
    assert rec.advantage.tolist() == [0.0, 2.0, 2.0, 4.0]
    assert rec.episode_advantage.tolist() == rec.advantage.tolist() and rec.step_advantage.tolist() == [0.0] * 4
    assert rec.returns.tolist() == pytest.approx([0.5, 1.0, 2.0, 2.0])  # r_t + 0.5 r_{t+1}
    assert rec.anchor_size.tolist() == [2, 2, 2, 2]  # anchor states 0 and 1 shared by both episodes


def test_learned_reward_scores_updates_freezes_and_resumes(warm_arithmetic_dir, tmp_path):
    from grouprl.models.loading import load_policy
    from grouprl.rewards.scorer import Scorer
    from grouprl.tasks import load_task
    from grouprl.train.trainer import Trainer

    cfg = build_config(
        None,
        {"output_dir": str(tmp_path / "run"), "batch_size": 2, "num_generations": 2, "max_steps": 5, "n_eval": 4},
        environ={},
    )
    task = load_task(cfg)
    learned = CountingLength()
    scorer = Scorer.from_config(cfg, task, learned=[learned], learned_weights=[0.5])
    policy = load_policy(cfg.model, str(warm_arithmetic_dir), torch.device("cpu"), need_reference=False)
    trainer = Trainer(cfg, policy, task, scorer)
    record = trainer.train_step()
    base = [v.parts["arithmetic_digits"] for v in record.scores.verdicts]
    lengths = [len(ep.steps[-1].action_text) for ep in record.episodes]
    # R = B + w * D with D scored before the update (scale 1), then one update per batch
    assert record.scores.episode.tolist() == pytest.approx([b + 0.5 * n for b, n in zip(base, lengths)])
    assert learned.updates == 1 and record.scores.metrics["length_model/scale"] == 2.0
    assert "rewards/length_model/mean" in trainer.metrics(record)
    with scorer.eval_mode():  # evaluation scores with the learned reward but never updates it
        assert learned.frozen and scorer.score(record.episodes).metrics.get("length_model/scale") is None
    assert not learned.frozen and learned.updates == 1
    trainer.step = 1
    ckpt = trainer.checkpoint()
    fresh = CountingLength()
    resumed = Trainer(cfg, policy, task, Scorer.from_config(cfg, task, learned=[fresh]))
    resumed.resume(str(ckpt))
    assert (fresh.scale, fresh.updates) == (2.0, 1)
    without = Trainer(cfg, policy, task)  # a checkpoint without learned state cannot feed one
    without.checkpoint()
    with pytest.raises(FileNotFoundError, match="learned_rewards.pt"):
        Trainer(cfg, policy, task, Scorer.from_config(cfg, task, learned=[CountingLength()])).resume(
            str(tmp_path / "run" / "checkpoint-0")
        )


def test_trainer_hands_new_weights_to_the_backend_after_each_update(warm_arithmetic_dir, tmp_path):
    from grouprl.models.loading import load_policy
    from grouprl.rollout.generation import BACKENDS, HFBackend
    from grouprl.tasks import load_task
    from grouprl.train.trainer import Trainer

    class Recording(HFBackend):
        """HF generate on a frozen copy of the weights, refreshed only by load_weights (as vLLM)."""

        loads: list[int] = []

        def load_weights(self, model):
            self.model.load_state_dict(model.state_dict())
            Recording.loads.append(sum(float(p.sum()) for p in model.parameters()))

    BACKENDS["recording"] = lambda policy, cfg: Recording(
        load_policy(cfg.model, str(warm_arithmetic_dir), policy.device, need_reference=False).model,
        policy.tokenizer,
        policy.device,
    )
    try:
        cfg = build_config(
            None,
            {
                "output_dir": str(tmp_path / "run"),
                "batch_size": 2,
                "num_generations": 2,
                "generation_backend": "recording",
                "learning_rate": 1e-2,
            },
            environ={},
        )
        policy = load_policy(cfg.model, str(warm_arithmetic_dir), torch.device("cpu"), need_reference=False)
        trainer = Trainer(cfg, policy, load_task(cfg))
        assert trainer.backend.model is not policy.model
        for _ in range(2):
            trainer.train_step()
            assert all(torch.equal(a, b) for a, b in zip(trainer.backend.model.parameters(), policy.model.parameters()))
        assert len(Recording.loads) == 2
    finally:
        del BACKENDS["recording"]
    with pytest.raises(ConfigError, match="generation_backend.*'sglang'.*'hf'"):
        build_config(None, {"generation_backend": "sglang"}, environ={})


def test_a_task_declares_its_own_config_section(tmp_path):
    from grouprl.config import EXTRA_SECTIONS, FIELD_SECTION, SECTIONS, Section
    from grouprl.tasks.arithmetic import generate_rows
    from grouprl.tasks.base import SingleTurnTask
    from grouprl.tasks.registry import TASKS, load_task, register_task

    class CountingConfig(Section):
        counting_start: int = Field(1, ge=0, description="counting: first number")

    @register_task("counting", max_new_tokens=3, section=("counting", CountingConfig))
    def build_counting(cfg):
        start = cfg.counting.counting_start
        rows = [
            {"question": f"{n}+1", "ground_truth": str(n + 1), "gold_completion": str(n + 1)}
            for n in range(start, start + 5)
        ]
        return SingleTurnTask("counting", rows, rows, None, ["arithmetic_exact"], "arithmetic_exact")

    try:
        cfg = build_config(None, {"task": "counting", "counting_start": 7}, environ={})  # a flat flag
        assert cfg.counting.counting_start == 7 and cfg.rollout.max_new_tokens == 3
        assert load_task(cfg).train_rows[0]["question"] == "7+1"
        recipe = tmp_path / "r.yaml"
        recipe.write_text("task: {task: counting}\ncounting: {counting_start: 3}\n")  # nested
        assert build_config(recipe, environ={"GROUPRL_COUNTING_START": "4"}).counting.counting_start == 4
        assert build_config(recipe, environ={}).model_dump()["counting"] == {"counting_start": 3}
        with pytest.raises(ConfigError, match="counting_start.*-1.*greater than or equal to 0"):
            build_config(None, {"counting_start": -1}, environ={})
        assert generate_rows  # the built-in tasks are untouched by the new one
    finally:
        del TASKS["counting"], SECTIONS["counting"], EXTRA_SECTIONS["counting"], FIELD_SECTION["counting_start"]


def test_invalid_penalty_in_returns_or_on_the_invalid_step_alone():
    """grouprl's convention: the penalty is a step reward, so it is discounted into earlier steps'
    returns and lowers the episode score. verl-agent's (invalid_penalty: on_step): neither; the
    invalid step's own row is lowered by the penalty before the group statistics instead."""
    from grouprl.algos.advantages import get_estimator
    from grouprl.records import Episode, Step
    from grouprl.rewards.scorer import Scorer
    from grouprl.train.advantages import compute_advantage_record, estimator_options

    def episodes():
        out = []
        for k, invalid in enumerate([False, True]):  # one group; episode 1's first step is invalid
            steps = [
                Step(
                    prompt_text="",
                    prompt_ids=[],
                    action_text="a",
                    action_ids=[],
                    truncated=False,
                    anchor_state=t,
                    valid=not (invalid and t == 0),
                    penalty=0.1 if invalid and t == 0 else 0.0,
                    env_reward=1.0 if t == 1 else 0.0,
                )
                for t in range(2)
            ]
            out.append(Episode(group_id=0, index_in_group=k, row={}, steps=steps))
        return out

    results = {}
    for convention in ("in_returns", "on_step"):
        cfg = build_config(None, {"advantage": "gigpo", "gamma": 0.5, "invalid_penalty": convention}, environ={})
        eps = episodes()
        scored = Scorer([], [], penalty_in_rewards=convention == "in_returns").score(eps)
        scores = scored.episode
        estimator = get_estimator("gigpo")
        results[convention] = (
            scores,
            compute_advantage_record(
                eps,
                scores,
                [v.step_rewards for v in scored.verdicts],
                cfg.algorithm,
                estimator,
                estimator_options(cfg.algorithm, estimator),
                penalty_on_step=convention == "on_step",
            ),
        )
    (s_in, rec_in), (s_on, rec_on) = results["in_returns"], results["on_step"]
    assert s_in.tolist() == pytest.approx([1.0, 0.9]) and s_on.tolist() == [1.0, 1.0]
    # steps: e0t0, e0t1, e1t0 (invalid), e1t1; returns with gamma 0.5
    assert rec_in.returns.tolist() == pytest.approx([0.5, 1.0, 0.4, 1.0])
    assert rec_on.returns.tolist() == pytest.approx([0.5, 1.0, 0.5, 1.0])
    # on_step, verl-agent's flow: the invalid row's score (0.9) and return (0.4) are lowered before the group
    # and anchor statistics, so the valid episode's rows gain what the invalid one loses:
    # A_E = row score - mean of first rows (1, 0.9); A_S = return - anchor mean ({0.5, 0.4}, {1, 1})
    assert rec_on.advantage.tolist() == pytest.approx([0.05 + 0.05, 0.05, -0.05 - 0.05, 0.05])
    assert rec_in.advantage[2] < 0 and rec_in.advantage[0] > 0  # in_returns: both episodes' steps move


def test_a_task_offers_learned_rewards_eval_metrics_and_its_tokenizer_kind(tiny_arithmetic_dir, tmp_path):
    """The hooks a task may add (GRAIL's slates use all three): ``scorer_extras(cfg)`` gives the scorer
    its learned rewards, ``eval_metrics(episodes)`` joins evaluation's result, ``tiny_tokenizer``
    picks the tiny model's tokenizer."""
    from grouprl.models.loading import load_policy
    from grouprl.models.tiny import init_tiny
    from grouprl.rewards.scorer import Scorer
    from grouprl.rollout.generation import HFBackend, SamplingParams
    from grouprl.tasks import load_task
    from grouprl.models.loading import auto_tokenizer
    from grouprl.job.evaluate import evaluate

    cfg = build_config(None, {"n_eval": 6}, environ={})
    task = load_task(cfg)
    learned = CountingLength()
    task.scorer_extras = lambda cfg: {"learned": [learned], "learned_weights": [2.0]}
    task.eval_metrics = lambda episodes: {"answered": sum(bool(ep.steps[-1].action_text) for ep in episodes)}
    scorer = Scorer.from_config(cfg, task)
    assert scorer.learned == [learned] and scorer.learned_weights == [2.0]
    policy = load_policy(cfg.model, str(tiny_arithmetic_dir), torch.device("cpu"), need_reference=False)
    result = evaluate(
        HFBackend(policy.model, policy.tokenizer, policy.device),
        policy.tokenizer,
        task,
        task.eval_rows,
        SamplingParams.for_eval(cfg),
        scorer,
    )
    assert 0 <= result["answered"] <= 6 and learned.updates == 0  # frozen during evaluation
    word = init_tiny("the cat sat on the mat", tmp_path / "word", 16, 1, 2, tokenizer="word")
    assert len(auto_tokenizer(str(word))("the cat sat", add_special_tokens=False)["input_ids"]) == 3  # words


def test_a_config_option_the_estimator_does_not_take_is_named_not_dropped_silently(caplog):
    from grouprl.algos.advantages import get_estimator
    from grouprl.train.advantages import estimator_options

    cfg = build_config(None, {"advantage": "rloo", "scale_rewards": "batch"}, environ={})
    with caplog.at_level("WARNING", logger="grouprl"):
        assert estimator_options(cfg.algorithm, get_estimator("rloo")) == {}
    assert "'rloo' does not use scale_rewards" in caplog.text
    caplog.clear()
    cfg = build_config(None, {"advantage": "grpo", "scale_rewards": "batch"}, environ={})
    with caplog.at_level("WARNING", logger="grouprl"):
        assert estimator_options(cfg.algorithm, get_estimator("grpo")) == {"scale": "batch"}
    assert "does not use" not in caplog.text


def test_user_estimator_from_a_package_module(tmp_path, monkeypatch):
    """``package.module:function`` names an estimator as it names a reward; its options are checked."""
    from grouprl.algos.advantages import get_estimator

    pkg = tmp_path / "my_estimators"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "signs.py").write_text(ESTIMATOR)
    monkeypatch.syspath_prepend(str(tmp_path))
    estimator = get_estimator("my_estimators.signs:sign_advantage")
    assert estimator.options == ("margin",) and not estimator.step_level
    scores, groups = torch.tensor([1.0, 0.0, 0.5, 0.5]), torch.tensor([0, 0, 1, 1])
    assert run_estimator(get_estimator("my_estimators.signs:sign_advantage"), scores, groups, margin=0.1).tolist() == [
        1.0,
        -1.0,
        0.0,
        0.0,
    ]
    with pytest.raises(ValueError, match="unknown option 'margn'"):
        run_estimator(get_estimator("my_estimators.signs:sign_advantage"), scores, groups, margn=0.1)
