"""Rewards inside grouprl: names resolved from files and modules, weights, None, and failing rewards."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from grouprl.cli import main
from grouprl.records import Episode
from grouprl.rewards.guard import RewardFailure
from grouprl.rewards.scorer import Scorer
from grouprl.rewards.registry import get_reward
from run_helpers import one_step_episodes

USER_REWARDS = textwrap.dedent('''
    from grouprl.records import EvaluateResult
    from grouprl.rewards.kit import reward_function

    @reward_function
    def short_answer(messages, ground_truth=None, **kwargs):
        """Typed: sees the whole conversation; 1 for answers of at most 3 characters."""
        assert messages[0]["role"] if isinstance(messages[0], dict) else messages[0].role
        return EvaluateResult(score=float(len(messages[-1].content) <= 3))

    def opinionated(completion, ground_truth, **row):
        """Plain: no opinion (None) unless the answer starts with 1."""
        return 1.0 if completion.startswith("1") else None

    def explodes(completion, ground_truth, **row):
        if completion == "boom":
            raise ValueError("cannot score boom")
        return 0.5
''')


def _episodes(answers: list[str], truth: str = "12") -> list[Episode]:
    return one_step_episodes(answers, truth=truth, question="5+7")


@pytest.fixture()
def user_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(USER_REWARDS)
    return path


def score_episodes(
    episodes,
    names,
    weights,
    correct,
    normalize_weights=True,
    max_error_fraction=1.0,
    options=None,
    sandbox_user_rewards=False,
    default_step_reward=0.0,
):
    """The run's scorer, built from these settings, on one batch: its verdicts and metrics."""
    scores = Scorer(
        names,
        weights,
        correct,
        normalize_weights=normalize_weights,
        max_error_fraction=max_error_fraction,
        reward_kwargs=options,
        sandbox_user_rewards=sandbox_user_rewards,
        default_step_reward=default_step_reward,
    ).score(episodes)
    return scores.verdicts, scores.metrics


def test_names_resolve_to_builtins_files_and_modules(user_file):
    assert get_reward("gsm8k_final").__name__ == "gsm8k_final"
    assert get_reward(f"{user_file}:short_answer").reward_id == "short_answer"
    assert get_reward("grouprl.rewards.builtin.number_answer:arithmetic_exact")("12", "12") == 1.0
    with pytest.raises(KeyError, match="has no function 'nope'"):
        get_reward(f"{user_file}:nope")
    with pytest.raises(KeyError, match="cannot import module"):
        get_reward("no_such_pkg.mod:fn")
    with pytest.raises(KeyError, match="unknown reward 'nope'"):
        get_reward("nope")


def test_weights_are_normalized_and_none_is_no_opinion(user_file):
    eps = _episodes(["12", "1234", "77"])
    names = ["arithmetic_exact", f"{user_file}:short_answer", f"{user_file}:opinionated"]
    v, _ = score_episodes(eps, names, [2.0, 1.0, 1.0], "arithmetic_exact")
    # weights 2:1:1 -> 0.5, 0.25, 0.25; "opinionated" has no opinion on "77"
    assert v[0].score == pytest.approx(0.5 * 1 + 0.25 * 1 + 0.25 * 1)
    assert v[1].score == pytest.approx(0.5 * 0 + 0.25 * 0 + 0.25 * 1)
    assert v[2].score == pytest.approx(0.5 * 0 + 0.25 * 1)
    assert v[2].parts[f"{user_file}:opinionated"] is None
    assert [x.correct for x in v] == [True, False, False]
    raw, _ = score_episodes(_episodes(["12"]), names, [2.0, 1.0, 1.0], "arithmetic_exact", normalize_weights=False)
    assert raw[0].score == pytest.approx(4.0)


def test_a_failing_reward_marks_the_sample_and_stops_only_past_the_threshold(user_file):
    name = f"{user_file}:explodes"
    eps = _episodes(["12", "boom", "13", "14"])
    v, metrics = score_episodes(eps, [name], [1.0], "arithmetic_exact", max_error_fraction=0.5)
    assert metrics == {"reward_errors": 1.0, "reward_error_fraction": 0.25}
    assert v[1].parts[name] is None and "cannot score boom" in v[1].errors[0]
    assert v[0].errors == [] and v[0].score == 0.5
    with pytest.raises(RewardFailure, match="1 of 4 samples failed"):
        score_episodes(_episodes(["12", "boom", "13", "14"]), [name], [1.0], "arithmetic_exact", max_error_fraction=0.1)


def test_typed_user_reward_in_a_training_run(warm_arithmetic_dir, user_file, tmp_path):
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--model_name_or_path",
                str(warm_arithmetic_dir),
                "--output_dir",
                str(out),
                "--rewards",
                "arithmetic_digits",
                f"{user_file}:short_answer",
                "--reward_weights",
                "3",
                "1",
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
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert {
        "rewards/short_answer/mean",
        "rewards/arithmetic_digits/mean",
        "reward_errors",
        "sandbox_fallbacks",
    } <= metrics[0].keys()
    rows = [json.loads(line) for line in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()]
    for r in rows:
        parts = r["rewards"]
        want = 0.75 * parts["arithmetic_digits"] + 0.25 * parts[f"{user_file}:short_answer"]
        assert r["reward"] == pytest.approx(want)


def test_step_outputs_become_step_rewards_and_bad_indices_are_named():
    from grouprl.records import EvaluateResult, StepOutput
    from grouprl.rewards import registry
    from grouprl.rewards.kit import reward_function

    @reward_function
    def per_step(messages, ground_truth=None, index=0, **kwargs):
        return EvaluateResult(score=1.0, step_outputs=[StepOutput(step_index=index, base_reward=0.25)])

    registry.REWARDS["per_step_test"] = per_step
    try:
        eps = _episodes(["12"])
        v, _ = score_episodes(eps, ["per_step_test"], [1.0], "arithmetic_exact")
        assert v[0].step_rewards == [0.25] and v[0].score == 1.0 and v[0].errors == []
        bad, _ = score_episodes(
            _episodes(["12"]), ["per_step_test"], [1.0], "arithmetic_exact", options={"per_step_test": {"index": 3}}
        )
        assert "step_index 3" in bad[0].errors[0] and "group 0, #0" in bad[0].errors[0]
    finally:
        del registry.REWARDS["per_step_test"]


def test_recipe_reward_specs_with_weights_and_options(tmp_path):
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task

    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "task:\n  rewards:\n    - {name: arithmetic_digits, weight: 2}\n"
        "    - {name: soft_overlong, weight: 1, options: {max_completion_len: 4, cache_len: 2}}\n"
    )
    task = load_task(build_config(recipe, environ={}))
    assert task.reward_names == ["arithmetic_digits", "soft_overlong"] and task.reward_weights == [2, 1]
    assert task.reward_kwargs == {"soft_overlong": {"max_completion_len": 4, "cache_len": 2}}
    eps = _episodes(["12", "12345"])
    v, _ = score_episodes(eps, task.reward_names, task.reward_weights, "arithmetic_exact", options=task.reward_kwargs)
    # "12": arithmetic_digits 1.0 and 2 characters <= 4 - 2, so no length penalty
    assert v[0].score == pytest.approx(2 / 3 * 1.0 + 1 / 3 * 0.0)
    assert v[1].parts["soft_overlong"] == -1.0  # 5 characters > max_completion_len 4


SNOOPY = textwrap.dedent('''
    import os, socket
    from grouprl.records import EvaluateResult
    from grouprl.rewards.kit import reward_function

    @reward_function
    def snoopy(messages, ground_truth=None, secret_path=None, **kwargs):
        """Tries to read a planted secret and to open a socket; scores the answer length."""
        try:
            open(secret_path).read()
            leaked = True
        except OSError:
            leaked = False
        try:
            socket.create_connection(("127.0.0.1", 9), timeout=1)
            online = True
        except OSError:
            online = False
        return EvaluateResult(score=len(messages[-1].content) / 10, reason=f"leaked={leaked} online={online}")

    def plain_len(completion, ground_truth, **row):
        if completion == "boom":
            raise ValueError("no boom")
        return len(completion) / 10
''')


def test_user_rewards_run_in_the_sandbox(tmp_path):
    from grouprl.rewards.sandbox.runner import bwrap_available

    usable, why = bwrap_available()
    if not usable:
        pytest.skip(f"bubblewrap cannot start here: {why}")
    secret = Path.home() / f".grouprl_secret_{os.getpid()}"
    secret.write_text("top secret")
    try:
        path = tmp_path / "snoopy.py"
        path.write_text(SNOOPY)
        eps = _episodes(["12", "1234", "boom"])
        for ep in eps:
            ep.row["secret_path"] = str(secret)
        v, metrics = score_episodes(
            eps,
            [f"{path}:snoopy", f"{path}:plain_len"],
            [1.0, 1.0],
            "arithmetic_exact",
            normalize_weights=False,
            sandbox_user_rewards=True,
        )
        assert [x.parts[f"{path}:snoopy"] for x in v] == [0.2, 0.4, 0.4]
        assert v[0].parts[f"{path}:plain_len"] == 0.2
        assert v[2].parts[f"{path}:plain_len"] is None and "no boom" in v[2].errors[0]
        assert metrics["reward_errors"] == 1.0
        # In the sandbox the function could neither read the secret nor reach the network ...
        from grouprl.rewards.registry import get_reward
        from grouprl.rewards.sandbox.user_reward import user_reward_in_sandbox

        boxed = user_reward_in_sandbox(f"{path}:snoopy")(
            [[{"role": "assistant", "content": "x"}]], secret_path=[str(secret)]
        )
        assert boxed[0].reason == "leaked=False online=False", boxed[0]
        # ... while in-process the same function reads it.

        inside = get_reward(f"{path}:snoopy")([{"role": "assistant", "content": "x"}], secret_path=str(secret))
        assert "leaked=True" in inside.reason
    finally:
        secret.unlink()


def side_effect_reward_file(tmp_path, name: str):
    """A reward file whose import writes a marker: the marker exists only if it ran in-process."""
    from grouprl.rewards.sandbox.runner import bwrap_available

    usable, why = bwrap_available()
    if not usable:
        pytest.skip(f"bubblewrap cannot start here: {why}")
    marker = tmp_path / "imported_in_process"
    path = tmp_path / name
    path.write_text(
        textwrap.dedent(f"""
        from pathlib import Path
        try:  # a side effect at import time: only possible outside the sandbox
            Path({str(marker)!r}).write_text("imported")
        except OSError:
            pass

        def length_score(completion, ground_truth, **row):
            return len(completion) / 10
    """)
    )
    return path, marker


def test_sandboxed_user_reward_file_is_never_imported_in_process(warm_arithmetic_dir, tmp_path):
    path, marker = side_effect_reward_file(tmp_path, "side_effect.py")
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--model_name_or_path",
                str(warm_arithmetic_dir),
                "--output_dir",
                str(out),
                "--rewards",
                f"{path}:length_score",
                "--sandbox_user_rewards",
                "true",
                "--max_steps",
                "1",
                "--batch_size",
                "2",
                "--num_generations",
                "2",
                "--n_eval",
                "0",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["rewards"][f"{path}:length_score"] is not None for r in rows)
    assert not marker.exists()


def test_sandboxed_user_reward_file_is_never_imported_in_process_during_eval(warm_arithmetic_dir, tmp_path):
    """Evaluation before and after RL scores with the run's scorer, so the sandbox rule holds there
    too (it used to import the file in-process), and eval's mean reward follows normalize_weights."""
    import sys

    path, marker = side_effect_reward_file(tmp_path, "eval_side_effect.py")
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--model_name_or_path",
                str(warm_arithmetic_dir),
                "--output_dir",
                str(out),
                "--rewards",
                f"{path}:length_score",
                "--reward_weights",
                "2",
                "--normalize_weights",
                "false",
                "--sandbox_user_rewards",
                "true",
                "--max_steps",
                "1",
                "--batch_size",
                "2",
                "--num_generations",
                "2",
                "--n_eval",
                "3",
            ]
        )
        == 0
    )
    assert not marker.exists()
    assert not any(getattr(m, "__file__", None) == str(path) for m in list(sys.modules.values()))
    for name in ("before", "after"):
        rows = [json.loads(line) for line in (out / "eval" / f"{name}.jsonl").read_text().splitlines()]
        assert len(rows) == 3
        for r in rows:  # weight 2, not normalized: twice the sandboxed length score
            assert r["reward"] == pytest.approx(2 * len(r["completion"]) / 10)
