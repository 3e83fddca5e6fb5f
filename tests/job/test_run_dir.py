"""The run folder: a resumed run logs each step once; a fresh run does not mix with an old one; a
second run cannot share the folder; overwrite never deletes what the run reads; a damaged checkpoint
is refused before any log is touched (``last`` skips it)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from grouprl.config import ConfigError
from grouprl.job.run_dir import LOCK, RunFolder
from launch import child_env
from run_helpers import rows, train


def _steps(out, name):
    return [r["step"] for r in rows(out / name)]


def test_resume_cuts_the_logs_back_to_the_checkpoint(tiny_arithmetic_dir, tmp_path):
    out = tmp_path / "run"
    assert (
        train(tiny_arithmetic_dir, out, "--max_steps", "3", "--save_steps", "1", "--save_trajectories_every", "1") == 0
    )
    assert _steps(out, "metrics.jsonl") == [1, 2, 3]
    # Resume from checkpoint-1 (as after a crash past it): steps 2 and 3 are run and logged again, once.
    assert (
        train(
            tiny_arithmetic_dir,
            out,
            "--max_steps",
            "3",
            "--resume_from_checkpoint",
            str(out / "checkpoint-1"),
            "--save_trajectories_every",
            "1",
        )
        == 0
    )
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


@pytest.fixture(scope="module")
def finished(tiny_arithmetic_dir, tmp_path_factory):
    """A finished 2-step run with checkpoint-1 and checkpoint-2 (copied by each test that changes it)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert train(tiny_arithmetic_dir, out, "--max_steps", "2", "--save_steps", "1") == 0
    return out


def _copy(finished, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    return out


def _snapshot(out):
    """Every file of the run folder and its bytes (the lock file aside)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file() and p.name != LOCK}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("read", ["model", "chat_template", "output_dir_is_the_model"])
def test_overwrite_never_deletes_what_the_run_reads(read, finished, tiny_arithmetic_dir, tmp_path, capsys):
    out = _copy(finished, tmp_path)
    if read == "model":  # as the refusal message suggests: continue from a checkpoint into the same folder
        extra = ["--model_name_or_path", str(out / "checkpoint-1")]
    elif read == "chat_template":
        (out / "eval").mkdir()
        template = out / "eval" / "template.jinja"
        template.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
        extra = ["--chat_template", str(template)]
    else:
        for f in tiny_arithmetic_dir.iterdir():
            if f.is_file() and f.name != "config.json":
                shutil.copy(f, out / f.name)
        shutil.copy(tiny_arithmetic_dir / "config.json", out / "config.json")  # the model's config.json is a run file
        extra = ["--model_name_or_path", str(out)]
    before = _snapshot(out)
    capsys.readouterr()
    assert train(tiny_arithmetic_dir, out, "--overwrite_output_dir", "true", *extra) == 2
    err = _one_line(capsys)
    assert "overwrite_output_dir" in err and "nothing was deleted" in err
    assert _snapshot(out) == before


@pytest.mark.parametrize(
    "bad",
    [
        ["--advantage", "no_such_estimator"],
        ["--model_name_or_path", "./no/such/model"],
        ["--task", "prompt_dataset", "--dataset_name_or_path", "/no/such/data.jsonl"],
    ],
)
def test_overwrite_checks_everything_before_deleting_anything(bad, finished, tiny_arithmetic_dir, tmp_path, capsys):
    out = _copy(finished, tmp_path)
    before = _snapshot(out)
    assert train(tiny_arithmetic_dir, out, "--overwrite_output_dir", "true", *bad) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert _snapshot(out) == before


def _truncate(path):
    os.truncate(path, path.stat().st_size // 2)


def _garble(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _shard_missing(path):
    """Sharded weights whose index names a shard that is not there."""
    path.rename(path.with_name("model-00001-of-00002.safetensors"))
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    path.with_name("model.safetensors.index.json").write_text(json.dumps(index))


DAMAGE = {
    "model.safetensors": _truncate,
    "optimizer.pt": _truncate,
    "trainer_state.json": _truncate,
    "scheduler.pt": _truncate,
    "rng.pt": _truncate,
    "tokenizer.json": _truncate,
    "optimizer.pt:garbled": _garble,
    "model.safetensors:empty": lambda p: p.write_bytes(b""),
    "rng.pt:missing": lambda p: p.unlink(),
    "model.safetensors:shard missing": _shard_missing,
    "trainer_state.json:no step": lambda p: p.write_text('{"data_position": 2}'),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_checkpoint_is_refused_before_any_log_changes(
    damage, finished, tiny_arithmetic_dir, tmp_path, capsys
):
    out = _copy(finished, tmp_path)
    name = damage.split(":")[0]
    DAMAGE[damage](out / "checkpoint-2" / name)
    before = _snapshot(out)
    capsys.readouterr()
    assert (
        train(tiny_arithmetic_dir, out, "--max_steps", "3", "--resume_from_checkpoint", str(out / "checkpoint-2")) == 2
    )
    err = _one_line(capsys)
    assert name in err and "checkpoint-1" in err and "no log was changed" in err, err
    assert _snapshot(out) == before  # metrics, rollouts, trajectories: not cut back


def test_last_skips_an_incomplete_checkpoint(finished, tiny_arithmetic_dir, tmp_path, caplog):
    out = _copy(finished, tmp_path)
    _truncate(out / "checkpoint-2" / "optimizer.pt")
    with caplog.at_level("WARNING", logger="grouprl"):
        assert train(tiny_arithmetic_dir, out, "--max_steps", "2", "--resume_from_checkpoint", "last") == 0
    assert "checkpoint-2/optimizer.pt" in caplog.text  # named as skipped
    assert _steps(out, "metrics.jsonl") == [1, 2]  # resumed from checkpoint-1: step 2 replayed, logged once
    steps = _steps(out, "rollouts/rollouts.jsonl")
    assert steps.count(1) == steps.count(2) == 8


def test_last_with_no_whole_checkpoint_is_one_line(finished, tiny_arithmetic_dir, tmp_path, capsys):
    out = _copy(finished, tmp_path)
    for n in (1, 2):
        _truncate(out / f"checkpoint-{n}" / "model.safetensors")
    before = _snapshot(out)
    capsys.readouterr()
    assert train(tiny_arithmetic_dir, out, "--resume_from_checkpoint", "last") == 2
    assert "no checkpoint in" in _one_line(capsys)
    assert _snapshot(out) == before


def test_a_hand_edited_metrics_file_does_not_log_replayed_steps_twice(finished, tiny_arithmetic_dir, tmp_path):
    """metrics.jsonl round-tripped through pandas (steps as 3.0), CRLF line ends, a blank line, a note."""
    import pandas as pd

    out = _copy(finished, tmp_path)
    frame = pd.read_json(out / "metrics.jsonl", lines=True)
    frame["step"] = frame["step"].astype(float)
    text = frame.to_json(orient="records", lines=True).replace("\n", "\r\n")
    assert '"step":2.0' in text
    (out / "metrics.jsonl").write_text(text + "\r\nnote: resumed by hand after a crash\r\n", newline="")
    assert (
        train(tiny_arithmetic_dir, out, "--max_steps", "2", "--resume_from_checkpoint", str(out / "checkpoint-1")) == 0
    )
    lines = [line for line in (out / "metrics.jsonl").read_text().splitlines() if line.startswith("{")]
    assert [int(json.loads(line)["step"]) for line in lines] == [1, 2]
    assert "note: resumed by hand after a crash" in (out / "metrics.jsonl").read_text()  # a note is no step: kept


def test_two_runs_cannot_share_an_output_dir(tiny_arithmetic_dir, tmp_path):
    """A real run holds the folder: a second `grouprl train` into it refuses in one line, touching nothing."""
    out = tmp_path / "run"
    holder = RunFolder(out)
    holder.lock()
    try:
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "grouprl.cli",
                "train",
                "--model_name_or_path",
                str(tiny_arithmetic_dir),
                "--output_dir",
                str(out),
                "--max_steps",
                "1",
                "--n_eval",
                "0",
                "--device",
                "cpu",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=child_env(),
            cwd=tmp_path,
        )
    finally:
        holder.release()
    assert second.returncode == 2, second.stderr[-2000:]
    assert f"pid {os.getpid()}" in second.stderr and "in use by another grouprl run" in second.stderr
    assert second.stderr.strip().count("\n") == 0
    assert sorted(p.name for p in out.iterdir()) == [LOCK]  # the refused run wrote nothing


def test_two_runs_started_together_do_not_mix(tiny_arithmetic_dir, tmp_path):
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "grouprl.cli",
        "train",
        "--task",
        "arithmetic",
        "--model_name_or_path",
        str(tiny_arithmetic_dir),
        "--output_dir",
        str(out),
        "--max_steps",
        "2",
        "--save_steps",
        "1",
        "--batch_size",
        "2",
        "--num_generations",
        "4",
        "--max_new_tokens",
        "4",
        "--n_eval",
        "0",
        "--n_train",
        "20",
        "--device",
        "cpu",
    ]
    procs = [
        subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=child_env(), cwd=tmp_path
        )
        for _ in range(2)
    ]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(rc for rc, _ in results) == [0, 2], results
    loser = next(err for rc, err in results if rc == 2)
    assert "in use by another grouprl run" in loser or "already holds a run" in loser
    assert _steps(out, "metrics.jsonl") == [1, 2]
    assert sorted(p.name for p in out.glob("*checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]


def test_the_lock_goes_with_a_killed_run(tmp_path):
    """The kernel releases the flock when its holder dies (SIGKILL: no cleanup code runs)."""
    out = tmp_path / "run"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from grouprl.job.run_dir import RunFolder; "
            "RunFolder(sys.argv[1]).lock(); print('locked', flush=True); time.sleep(60)",
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert child.stdout.readline().strip() == "locked"
    with pytest.raises(ConfigError, match="in use by another grouprl run"):
        RunFolder(out).lock()
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    folder = RunFolder(out)
    folder.lock()  # free again
    with open(out / LOCK) as fh:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # and really held by us now
    folder.release()
