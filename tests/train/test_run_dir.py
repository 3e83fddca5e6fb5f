"""The run folder: a resumed run logs each step once; a fresh run does not mix with an old one."""

from __future__ import annotations

from run_helpers import rows, train


def _steps(out, name):
    return [r["step"] for r in rows(out / name)]


def test_resume_cuts_the_logs_back_to_the_checkpoint(tiny_arithmetic_dir, tmp_path):
    out = tmp_path / "run"
    assert train(tiny_arithmetic_dir, out, "--max_steps", "3", "--save_steps", "1",
                 "--save_trajectories_every", "1") == 0
    assert _steps(out, "metrics.jsonl") == [1, 2, 3]
    # Resume from checkpoint-1 (as after a crash past it): steps 2 and 3 are run and logged again, once.
    assert train(tiny_arithmetic_dir, out, "--max_steps", "3", "--resume_from_checkpoint",
                 str(out / "checkpoint-1"), "--save_trajectories_every", "1") == 0
    assert _steps(out, "metrics.jsonl") == [1, 2, 3]
    steps = _steps(out, "rollouts/rollouts.jsonl")
    assert sorted(set(steps)) == [1, 2, 3] and all(steps.count(s) == 8 for s in (1, 2, 3))
    # 'last' picks the newest checkpoint: nothing is left to run, nothing is logged twice.
    assert train(tiny_arithmetic_dir, out, "--max_steps", "3", "--resume_from_checkpoint", "last") == 0
    assert _steps(out, "metrics.jsonl") == [1, 2, 3]


def test_fresh_run_into_a_used_dir_refuses_unless_overwrite(tiny_arithmetic_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert train(tiny_arithmetic_dir, out) == 0
    (out / "my_notes.txt").write_text("not a run file")
    capsys.readouterr()
    assert train(tiny_arithmetic_dir, out) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "already holds a run" in err and "--overwrite_output_dir" in err
    assert _steps(out, "metrics.jsonl") == [1]
    assert train(tiny_arithmetic_dir, out, "--overwrite_output_dir", "true", "--max_steps", "2") == 0
    assert _steps(out, "metrics.jsonl") == [1, 2]  # the old run's line is gone, not appended to
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
    assert (out / "my_notes.txt").read_text() == "not a run file"  # only run files are removed


def test_resume_last_without_checkpoints_is_bad_input(tiny_arithmetic_dir, tmp_path, capsys):
    assert train(tiny_arithmetic_dir, tmp_path / "empty", "--resume_from_checkpoint", "last") == 2
    assert "holds no checkpoint-N" in capsys.readouterr().err
