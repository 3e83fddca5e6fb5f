"""distilled_judge keeps its documented contract (issue 32, class 11): ``max_judge_error_fraction`` is a share of
the batch, not of the judged sample, and the student reads text through the project's tokenizer loader (a
tiny char model's student sees the spaces and newlines). The judge is a real server on 127.0.0.1."""

from __future__ import annotations

import pytest

from grouprl.records import Episode, Step
from grouprl.rewards.guard import RewardFailure
from grouprl.rewards.scorer import Scorer
from hostile_http import HostileServer

TEMPLATE = "format:score_line <<<{{ completion }}>>>"


def batch(n: int, failing: set[int]) -> list[Episode]:
    out = []
    for i in range(n):
        ep = Episode(group_id=i // 4, index_in_group=i % 4, row={"question": "2+3", "ground_truth": "5"})
        ep.steps.append(
            Step(
                prompt_text="p",
                prompt_ids=[1],
                action_text="FAIL" if i in failing else "5",
                action_ids=[2],
                truncated=False,
                anchor_state=None,
                messages=[{"role": "user", "content": "2+3"}],
            )
        )
        out.append(ep)
    return out


def scorer(student, base_url, run_dir, **options) -> Scorer:
    opts = {
        "student": str(student),
        "device": "cpu",
        "updates_per_step": 1,
        "max_judge_error_fraction": 0.1,
        "judge": {"base_url": base_url, "model": "fail_marked", "retries": 0, "template": TEMPLATE},
        **options,
    }
    return Scorer(["distilled_judge"], [1.0], reward_kwargs={"distilled_judge": opts}, run_dir=str(run_dir))


def test_the_error_fraction_is_a_share_of_the_batch(tiny_arithmetic_dir, tmp_path):
    with HostileServer() as server:
        # 2 of 20 completions (10 % of the batch) get no verdict; the judge sees 10 % of each batch: a sample
        # holding one of them is half its sample in error, yet the batch is within the 10 % it may lose.
        sampled = scorer(
            tiny_arithmetic_dir, server.base_url, tmp_path / "a", judge_steps=0, sample_fraction=0.1, min_fraction=0.1
        )
        errors = 0
        for _ in range(12):
            errors += sampled.score(batch(20, {3, 11})).metrics["distill/judge_errors"]
        assert errors > 0  # the sample did hit them
        # More than 10 % of the batch failing stops the run, sampled or not.
        judged_half = scorer(
            tiny_arithmetic_dir, server.base_url, tmp_path / "b", judge_steps=0, sample_fraction=0.5, min_fraction=0.5
        )
        with pytest.raises(RewardFailure, match="max_judge_error_fraction=0.1 of the batch's 20"):
            judged_half.score(batch(20, set(range(20))))


def test_the_student_reads_text_through_the_projects_tokenizer_loader(tiny_arithmetic_dir, tmp_path):
    student = scorer(tiny_arithmetic_dir, "http://127.0.0.1:9/v1", tmp_path).learned[0].student
    text = student.render([{"role": "user", "content": "2 + 3"}, {"role": "assistant", "content": "5 \n5"}])
    assert " + " in text and "\n" in text
    assert student.tokenizer.decode(student.tokenizer(text)["input_ids"]) == text
