"""--report_to wandb: an offline W&B run under output_dir/wandb that honours WANDB_PROJECT / WANDB_NAME."""

from __future__ import annotations

import json

import pytest

from grouprl import cli

wandb = pytest.importorskip("wandb")


@pytest.fixture(scope="module")
def wandb_run(tiny_arithmetic_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("wandb")
    out = root / "run"
    mp = pytest.MonkeyPatch()
    try:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_PROJECT", "myproj")
        mp.setenv("WANDB_NAME", "myrun")
        mp.setenv("WANDB_DIR", str(root / "wandb_dir"))
        mp.setenv("WANDB_CACHE_DIR", str(root / "wandb_cache"))
        mp.setenv("WANDB_CONFIG_DIR", str(root / "wandb_config"))
        mp.setenv("WANDB_DATA_DIR", str(root / "wandb_data"))
        mp.setenv("WANDB_SILENT", "true")
        mp.setenv("WANDB_DISABLE_GIT", "true")
        rc = cli.main(
            [
                "train",
                "--task",
                "arithmetic",
                "--model_name_or_path",
                str(tiny_arithmetic_dir),
                "--report_to",
                "wandb",
                "--wandb_project",
                "notthis",
                "--run_name",
                "notthiseither",
                "--max_steps",
                "1",
                "--batch_size",
                "2",
                "--num_generations",
                "2",
                "--max_new_tokens",
                "4",
                "--n_eval",
                "2",
                "--n_train",
                "20",
                "--output_dir",
                str(out),
                "--device",
                "cpu",
            ]
        )
    finally:
        mp.undo()
    assert rc == 0
    return out


def _run_dir(out):
    runs = sorted((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, list((out / "wandb").iterdir()) if (out / "wandb").exists() else "no wandb dir"
    return runs[0]


def _scan_wandb_log(path) -> list[bytes]:
    """Records of a .wandb transaction log (the offline store `wandb sync` uploads).

    The format is LevelDB's log: a 7-byte file header (':W&B', magic 0xBEE1, version), then
    32 KiB blocks of records, each with a 7-byte header <crc32:u32, length:u16, type:u8>;
    type 1 = a whole record, 2/3/4 = first/middle/last fragment. (wandb 0.31 no longer ships
    a Python reader for it.)
    """
    import struct

    data = path.read_bytes()
    assert data[:4] == b":W&B" and struct.unpack("<H", data[4:6])[0] == 0xBEE1
    block, pos = 32768, 7
    out, pending = [], b""
    while pos + 7 <= len(data):
        space = block - pos % block
        if space < 7:  # block trailer
            pos += space
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:  # zero padding up to the end of the block
            pos += space
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            out.append(pending + chunk)
            pending = b""
    return out


def _records(run_dir):
    from wandb.proto import wandb_internal_pb2

    (log,) = run_dir.glob("run-*.wandb")
    records = []
    for data in _scan_wandb_log(log):
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(data)
        records.append(rec)
    assert records
    return records


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def test_offline_run_dir_under_output_dir(wandb_run):
    run_dir = _run_dir(wandb_run)
    assert run_dir.is_dir()
    wandb_files = list(run_dir.glob("run-*.wandb"))
    assert len(wandb_files) == 1 and wandb_files[0].stat().st_size > 0
    assert (run_dir / "files").is_dir()
    # the run's id is in both the dir name and the log name
    run_id = run_dir.name.rsplit("-", 1)[-1]
    assert wandb_files[0].name == f"run-{run_id}.wandb"


def test_env_project_and_name_win_over_config(wandb_run):
    records = _records(_run_dir(wandb_run))
    runs = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert runs, "no run record in the .wandb log"
    assert runs[0].project == "myproj"
    assert runs[0].display_name == "myrun"


def test_metrics_and_summary_logged(wandb_run):
    records = _records(_run_dir(wandb_run))
    history = [r.history for r in records if r.WhichOneof("record_type") == "history"]
    assert history, "no history record"
    keys = {_key(item) for h in history for item in h.item}
    for key in ("reward", "step_time", "frac_reward_zero_std"):
        assert key in keys, sorted(keys)
    # the update's statistics: entropy from a real update, or a step with every advantage zero, which is skipped
    assert "entropy" in keys or "skipped_zero_advantage" in keys, sorted(keys)
    steps = {json.loads(item.value_json) for h in history for item in h.item if _key(item) == "_step"}
    assert steps == {1}  # logged at the trainer's step
    assert [h.step.num for h in history] == [1]

    summary_keys = set()
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            summary_keys |= {_key(item) for item in r.summary.update}
    assert {"accuracy_before", "accuracy_after", "n_eval"} <= summary_keys, sorted(summary_keys)

    # the flat config goes with the run record (and any later config records)
    config = {}
    for r in records:
        kind = r.WhichOneof("record_type")
        update = r.run.config.update if kind == "run" else r.config.update if kind == "config" else []
        config.update({_key(item): json.loads(item.value_json) for item in update})
    assert config["max_steps"] == 1 and config["num_generations"] == 2 and config["report_to"] == "wandb"
    assert config["wandb_project"] == "notthis"  # recorded as configured, but the env var named the project


def test_metrics_jsonl_still_written(wandb_run):
    lines = (wandb_run / "metrics.jsonl").read_text().split("\n")[:-1]
    assert len(lines) == 1 and json.loads(lines[0])["step"] == 1
    assert json.loads((wandb_run / "summary.json").read_text())["steps"] == 1
