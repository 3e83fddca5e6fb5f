"""With ``sandbox_user_rewards`` on, nothing that would be imported into the trainer is accepted.

Each reward below would run code in the trainer process if it were imported; the code would
leave a marker file. The refusal must come first, name the reward, and leave no marker.
"""

from __future__ import annotations

import py_compile

import pytest

from grouprl.rewards.resolve import resolve_reward

# The marker write fails inside the sandbox (no such folder there), and a file whose import fails is
# refused when the scorer is built; so the write is allowed to fail, and the marker shows where it ran.
BODY = (
    "import pathlib\ntry:\n    pathlib.Path({marker!r}).write_text('imported')\nexcept OSError:\n    pass\n"
    "def fn(completion, truth):\n    return 1.0\n"
)


@pytest.fixture()
def reward_files(tmp_path):
    marker = tmp_path / "IMPORTED"
    src = tmp_path / "user_reward.py"
    src.write_text(BODY.format(marker=str(marker)))
    pyc = tmp_path / "user_reward.pyc"
    py_compile.compile(str(src), cfile=str(pyc))
    so = tmp_path / "user_reward.so"
    so.write_bytes(b"\x7fELF not really")
    (tmp_path / "user_pkg").mkdir()
    (tmp_path / "user_pkg" / "__init__.py").write_text(BODY.format(marker=str(marker)))
    return tmp_path, marker


@pytest.mark.parametrize(
    "spec", ["user_reward.pyc:fn", "./user_reward.pyc:fn", "user_reward.so:fn", "user_pkg:fn", "user_pkg/__init__:fn"]
)
def test_anything_not_run_in_the_sandbox_is_refused(reward_files, monkeypatch, spec):
    where, marker = reward_files
    monkeypatch.chdir(where)
    monkeypatch.syspath_prepend(str(where))  # so 'user_pkg' would import if it were tried
    with pytest.raises(KeyError) as info:
        resolve_reward(spec, sandbox_user_rewards=True)
    assert spec in str(info.value) and "refused" in str(info.value)
    assert not marker.exists()


def test_py_file_is_wrapped_not_imported_and_builtins_still_work(reward_files, monkeypatch):
    where, marker = reward_files
    monkeypatch.chdir(where)
    fn = resolve_reward("user_reward.py:fn", sandbox_user_rewards=True)
    assert getattr(fn, "reward_mode", None) == "batch" and not marker.exists()
    assert resolve_reward("gsm8k_final", sandbox_user_rewards=True) is not None
    # Without the option the same .pyc is imported (the user's own trusted code): the marker shows it.
    resolve_reward("./user_reward.pyc:fn", sandbox_user_rewards=False)
    assert marker.read_text() == "imported"


def test_correct_reward_follows_the_sandbox_rule(reward_files, monkeypatch):
    """The judge of correctness (``correct_reward``; a prompt dataset's first reward by default) is
    the sandboxed reward itself, never a second, in-process import of the same file."""
    from grouprl.rewards.scorer import Scorer

    where, marker = reward_files
    monkeypatch.chdir(where)
    scorer = Scorer(["user_reward.py:fn"], [1.0], correct_reward="user_reward.py:fn", sandbox_user_rewards=True)
    assert scorer.judge is scorer.fns["user_reward.py:fn"] and not marker.exists()
    with pytest.raises(KeyError, match="refused"):
        Scorer(["gsm8k_final"], [1.0], correct_reward="user_reward.pyc:fn", sandbox_user_rewards=True)
    assert not marker.exists()
