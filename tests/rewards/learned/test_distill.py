"""Judge distillation: the student learns the judge's labels online; the judge is then asked on a shrinking
sample; agreement is measured; the whole state resumes. The judge is the scripted grader on 127.0.0.1."""

from __future__ import annotations

import pytest

from grouprl.config import ConfigError
from grouprl.records import Episode, Step
from grouprl.rewards.scorer import Scorer
from judge_standin import grader  # noqa: F401 - the fixture

pytest.importorskip("openai")


def batch(step: int) -> list[Episode]:
    """16 episodes: right answers are '5', wrong ones '9' (an easy rule for a tiny student)."""
    out = []
    for i in range(16):
        a, b = (i + step) % 4, (i * 3 + step) % 2
        question = f"{a}+{5 - a}"
        ep = Episode(group_id=i // 4, index_in_group=i % 4, row={"question": question, "ground_truth": "5"})
        ep.steps.append(
            Step(
                prompt_text="p",
                prompt_ids=[1],
                action_text="5" if b else "9",
                action_ids=[2],
                truncated=False,
                anchor_state=None,
                messages=[{"role": "user", "content": question}],
            )
        )
        out.append(ep)
    return out


def distill_scorer(student, base_url, run_dir, **options) -> Scorer:
    opts = {
        "student": str(student),
        "device": "cpu",
        "judge": {"base_url": base_url, "model": "grader", "retries": 1, "backoff_seconds": 0.05},
        "judge_steps": 3,
        "sample_fraction": 0.5,
        "sample_decay": 0.5,
        "min_fraction": 0.125,
        "learning_rate": 3e-3,
        "updates_per_step": 8,
        **options,
    }
    return Scorer(["distilled_judge"], [1.0], reward_kwargs={"distilled_judge": opts}, run_dir=str(run_dir))


def test_student_learns_the_judge_then_the_judge_is_sampled(tiny_arithmetic_dir, grader, tmp_path):
    scorer = distill_scorer(tiny_arithmetic_dir, grader.base_url, tmp_path / "run")
    rows = []
    for step in range(7):
        eps = batch(step)
        scores = scorer.score(eps)
        rows.append(scores.metrics)
        if step < 3:  # judge phase: the reward is the judge's verdict
            assert [v.parts["distilled_judge"] for v in scores.verdicts] == [
                float(ep.steps[0].action_text == "5") for ep in eps
            ]
    assert [r["distill/judged"] for r in rows] == [16, 16, 16, 8, 4, 2, 2]  # 1, 1, 1, 1/2, 1/4, then min 1/8
    assert [r["distilled_judge/requests"] for r in rows] == [16, 16, 16, 8, 4, 2, 2]
    assert rows[-1]["distill/agreement"] == 1.0 and rows[0]["distill/student_loss"] > rows[-1]["distill/student_loss"]
    # After the judge phase the student scores everything, and it has learned the rule.
    eps = batch(9)
    with scorer.eval_mode():  # frozen: no judge call, no update
        verdicts = scorer.score(eps).verdicts
    right = [v.parts["distilled_judge"] for ep, v in zip(eps, verdicts) if ep.steps[0].action_text == "5"]
    wrong = [v.parts["distilled_judge"] for ep, v in zip(eps, verdicts) if ep.steps[0].action_text == "9"]
    assert min(right) > 0.5 > max(wrong)
    # The state resumes: a fresh scorer given it scores the same, and samples the same next step.
    fresh = distill_scorer(tiny_arithmetic_dir, grader.base_url, tmp_path / "run")
    fresh.load_state_dict(scorer.state_dict())
    with fresh.eval_mode():
        again = batch(9)
        again_verdicts = fresh.score(again).verdicts
    assert [v.parts["distilled_judge"] for v in again_verdicts] == pytest.approx(
        [v.parts["distilled_judge"] for v in verdicts], abs=1e-6
    )
    assert fresh.learned[0].step == 7 and fresh.learned[0].fraction() == 0.125


def test_options_checked(tiny_arithmetic_dir, tmp_path):
    with pytest.raises(ConfigError, match="options 'student'"):
        Scorer(["distilled_judge"], [1.0], reward_kwargs={"distilled_judge": {"judge": {}}})
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['judge_step'\]"):
        distill_scorer(tiny_arithmetic_dir, "http://127.0.0.1:9/v1", tmp_path, judge_step=3)
