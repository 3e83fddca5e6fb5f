"""Budgets that cost a slow sample only itself, and reward files refused before any model loads.

Real runs of the real sandbox and real clocks: an endless program in code_execution, a reward file
that sleeps per sample, files with a syntax error or a ``sys.exit(0)`` at import."""

from __future__ import annotations

import json
import time

import pytest

from grouprl.cli import main
from grouprl.rewards.scorer import Scorer
from run_helpers import one_step_episodes

pytestmark = pytest.mark.usefixtures("bwrap")

SQUARE_TESTS = json.dumps(["assert square(3) == 9", "assert square(-2) == 4"])
LOOP = "```python\ndef square(x):\n    while True:\n        pass\n```"
GOOD = "```python\ndef square(x):\n    return x * x\n```"


def test_endless_programs_cost_their_own_samples_only():
    # 5 endless programs at 1 s each, sample after sample, outlast a 4 s budget for the whole batch:
    # one budget per batch turned the correct sample into a RewardTimeout too.
    episodes = one_step_episodes([LOOP] * 5 + [GOOD], truth=SQUARE_TESTS)
    scorer = Scorer(["code_execution"], [1.0], reward_kwargs={"code_execution": {"timeout": 1.0}}, reward_timeout=4.0)
    start = time.monotonic()
    scores = scorer.score(episodes)
    assert scores.metrics["reward_errors"] == 0.0, [v.errors for v in scores.verdicts]
    assert [v.parts["code_execution"] for v in scores.verdicts] == [0.0] * 5 + [1.0]
    assert "timeout" in scores.parts["code_execution"][0].reason
    assert time.monotonic() - start > 4.0  # the batch did take longer than one budget


SLEEPY = (
    "import time\n"
    "def fn(completion, ground_truth, **kw):\n"
    "    time.sleep(100 if completion == 'hang' else 0.3)\n"
    "    return 1.0 if completion == 'ok' else 0.0\n"
)


def test_sandboxed_user_reward_has_reward_timeout_per_sample(tmp_path):
    path = tmp_path / "sleepy.py"
    path.write_text(SLEEPY)
    episodes = one_step_episodes(["ok"] * 8 + ["hang", "no"])  # 9 x 0.3 s + a hang: past 1 s, far below 10 x 1 s
    scorer = Scorer([f"{path}:fn"], [1.0], sandbox_user_rewards=True, reward_timeout=1.0)
    scores = scorer.score(episodes)
    parts = [v.parts[f"{path}:fn"] for v in scores.verdicts]
    assert parts == [1.0] * 8 + [None, 0.0], [v.errors for v in scores.verdicts]
    assert scores.metrics["reward_errors"] == 1.0 and "reward_timeout=1s" in scores.verdicts[8].errors[0]


@pytest.mark.parametrize("sandboxed", [True, False])
@pytest.mark.parametrize(
    "source, found",
    [
        ("def fn(completion, ground_truth, **kw):\n    return (1.0\n\nx = 1\n", "SyntaxError"),
        ("import sys\nsys.exit(0)\ndef fn(completion, ground_truth, **kw):\n    return 1.0\n", "exit"),
        ("def other(completion, ground_truth, **kw):\n    return 1.0\n", "no function 'fn'"),
    ],
)
def test_a_reward_file_that_cannot_be_a_reward_is_refused_when_the_scorer_is_built(tmp_path, source, found, sandboxed):
    path = tmp_path / "bad_reward.py"
    path.write_text(source)
    with pytest.raises(KeyError) as err:
        Scorer([f"{path}:fn"], [1.0], sandbox_user_rewards=sandboxed)
    text = str(err.value)
    assert f"{path}:fn" in text and found in text, text
    if found == "SyntaxError":
        assert "line 2" in text or "line 4" in text, text


@pytest.mark.parametrize(
    "source, found",
    [
        ("def fn(completion, ground_truth, **kw):\n    return (1.0\n\nx = 1\n", "SyntaxError"),
        ("import sys\nsys.exit(0)\ndef fn(completion, ground_truth, **kw):\n    return 1.0\n", "exit"),
    ],
)
@pytest.mark.parametrize("sandboxed", ["true", "false"])
def test_grouprl_train_refuses_such_a_file_before_any_model_loads(tmp_path, capsys, source, found, sandboxed):
    path = tmp_path / "bad_reward.py"
    path.write_text(source)
    not_a_model = tmp_path / "not_a_model"  # loading it would fail: the reward must be refused first
    not_a_model.mkdir()
    rc = main(
        [
            "train",
            "--model_name_or_path",
            str(not_a_model),
            "--output_dir",
            str(tmp_path / "o"),
            "--max_steps",
            "1",
            "--n_eval",
            "0",
            "--rewards",
            f"{path}:fn",
            "--sandbox_user_rewards",
            sandboxed,
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "Traceback" not in err and err.count("\n") == 0, err
    assert err.startswith("grouprl: error: ") and f"{path}:fn" in err and found in err, err
