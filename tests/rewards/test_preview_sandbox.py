"""``grouprl rewards preview --sandbox_user_rewards``: the same rule as training, through the one scorer."""

from __future__ import annotations

import json
import os
import py_compile

import pytest

from grouprl.cli import main
from grouprl.rewards.sandbox import runner as sandbox

# 1.0 only inside the sandbox: there the project's files are not visible.
PROBE = "import os\ndef fn(completion, ground_truth, **kw):\n    return 0.0 if os.path.exists({marker!r}) else 1.0\n"


@pytest.fixture()
def samples(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps({"prompt": "1+1?", "completion": "2", "answer": "2"}) + "\n")
    return path


def test_preview_runs_a_user_file_in_the_sandbox(tmp_path, samples):
    usable, why = sandbox.bwrap_available()
    if not usable:
        pytest.skip(f"bubblewrap sandbox cannot start here: {why}")
    marker = tmp_path / "visible-only-outside.txt"
    marker.write_text("x")
    reward = tmp_path / "probe.py"
    reward.write_text(PROBE.format(marker=str(marker)))
    outside, inside = tmp_path / "outside.jsonl", tmp_path / "inside.jsonl"
    assert (
        main(["rewards", "preview", "--reward", f"{reward}:fn", "--samples", str(samples), "--out", str(outside)]) == 0
    )
    assert (
        main(
            [
                "rewards",
                "preview",
                "--reward",
                f"{reward}:fn",
                "--samples",
                str(samples),
                "--out",
                str(inside),
                "--sandbox_user_rewards",
            ]
        )
        == 0
    )
    assert json.loads(outside.read_text())["scores"][f"{reward}:fn"] == 0.0
    assert json.loads(inside.read_text())["scores"][f"{reward}:fn"] == 1.0


def test_preview_refuses_a_compiled_reward_when_sandboxed(tmp_path, samples, capsys):
    src = tmp_path / "r.py"
    src.write_text(f"open({str(tmp_path / 'IMPORTED')!r}, 'w').write('x')\ndef fn(c, t):\n    return 1.0\n")
    pyc = tmp_path / "r.pyc"
    py_compile.compile(str(src), cfile=str(pyc))
    rc = main(["rewards", "preview", "--reward", f"{pyc}:fn", "--samples", str(samples), "--sandbox_user_rewards"])
    assert rc == 2 and "refused" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "IMPORTED")
