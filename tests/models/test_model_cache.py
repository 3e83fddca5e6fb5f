"""The model cache with real processes and real files: two writers at once, a killed writer's staging
folder, truncated weights, a read-only cache. A tiny model saved with ``save_pretrained`` stands in for
the dequantised GGUF (the cache code path is the same: ``policy/model_cache.materialize_folder``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from grouprl.models.model_cache import ModelCacheError, damage, materialize_folder
from grouprl.models.pretrained import PROVENANCE, is_materialized

# One writer process: a tiny model saved into the staging folder, slowly (``pause`` seconds after the
# weights), each write logged, so a test sees how many times the folder was written.
WRITER = r"""
import json, sys, time
from pathlib import Path
from grouprl.models.model_cache import materialize_folder

target, log, pause = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])

def write(staging):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    with log.open("a") as out:
        out.write("write\n")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2)
    LlamaForCausalLM(config).save_pretrained(staging, safe_serialization=True)
    print("weights written", flush=True)
    time.sleep(pause)
    (staging / "provenance.json").write_text(json.dumps({"name": "tiny"}))

print(materialize_folder(target, write, ours=lambda folder: (folder / "provenance.json").is_file()), flush=True)
"""


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "OMP_NUM_THREADS": "1"}


def writer(target: Path, log: Path, pause: float = 0.0) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target), str(log), str(pause)],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen) -> tuple[str, str]:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-2000:]
    return out, err


def loads(folder: Path) -> bool:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder).config.vocab_size == 64


def test_two_concurrent_writers_write_once_and_both_get_the_whole_folder(tmp_path):
    target, log = tmp_path / "cache" / "tiny", tmp_path / "writes.log"
    first = writer(target, log, pause=3.0)
    while not log.exists():  # the first holds the lock and is writing
        time.sleep(0.05)
    second = writer(target, log)
    (out1, _), (out2, err2) = finish(first), finish(second)
    assert out1.strip().splitlines()[-1] == out2.strip().splitlines()[-1] == str(target)
    assert log.read_text().count("write") == 1, "the second writer must wait and reuse, not write again"
    assert "waiting for it to finish" in err2
    assert damage(target) is None and loads(target)
    assert not list(target.parent.glob(".tiny.partial-*"))


def test_a_killed_writers_staging_folder_is_cleaned_and_never_taken_for_the_model(tmp_path):
    target, log = tmp_path / "cache" / "tiny", tmp_path / "writes.log"
    killed = writer(target, log, pause=60.0)
    assert killed.stdout is not None
    assert killed.stdout.readline().strip() == "weights written"
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    assert list(target.parent.glob(".tiny.partial-*")) and not target.exists()
    finish(writer(target, log))
    assert not list(target.parent.glob(".tiny.partial-*"))
    assert damage(target) is None and loads(target)


def test_truncated_weights_are_not_ready_and_are_written_again(tmp_path):
    target, log = tmp_path / "cache" / "tiny", tmp_path / "writes.log"
    finish(writer(target, log))
    files = json.loads((target / "checksums.json").read_text())["files"]
    assert (
        set(files)
        == {p.name for p in target.iterdir() if p.name != "checksums.json"}
        >= {"model.safetensors", "provenance.json"}
    )
    weights = target / "model.safetensors"
    size = weights.stat().st_size
    with weights.open("r+b") as handle:
        handle.truncate(size // 2)
    assert "model.safetensors is" in (damage(target, thorough=False) or "")
    assert not is_materialized(target)  # what `grouprl train` asks before it uses a packaged model
    _, err = finish(writer(target, log))
    assert "damaged" in err and log.read_text().count("write") == 2
    assert weights.stat().st_size == size and damage(target) is None and loads(target)
    # the same length with other bytes: only the sha256 sees it
    with weights.open("r+b") as handle:
        handle.seek(size - 8)
        handle.write(b"\0" * 8)
    assert damage(target, thorough=False) is None and "sha256" in (damage(target) or "")
    # a folder that is not ours is refused in one line, never overwritten
    (target / PROVENANCE).unlink()
    with pytest.raises(ModelCacheError) as err:
        materialize_folder(target, lambda staging: None, ours=lambda folder: (folder / PROVENANCE).is_file())
    assert "\n" not in str(err.value) and "not a finished model folder" in str(err.value)


def read_only(folder: Path, command: list[str], environ: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``command`` seeing ``folder`` on a read-only mount (as root: a private mount namespace; else
    the folder made read-only for its owner)."""
    if os.geteuid() == 0 and shutil.which("unshare"):
        script = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" && exec "$@"'
        return subprocess.run(
            ["unshare", "-m", "sh", "-c", script, str(folder), *command],
            env=environ,
            capture_output=True,
            text=True,
            timeout=180,
        )
    folders = [folder, *(p for p in folder.rglob("*") if p.is_dir())]
    for path in folders:
        path.chmod(0o555)
    try:
        return subprocess.run(command, env=environ, capture_output=True, text=True, timeout=180)
    finally:
        for path in folders:
            path.chmod(0o755)


def test_a_read_only_cache_is_one_line_and_a_finished_folder_in_it_is_still_used(tmp_path):
    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    grouprl = [sys.executable, "-m", "grouprl.cli", "init-model", "--from", "smollm2-135m-instruct"]
    done = read_only(cache, grouprl, {**env(), "GROUPRL_CACHE": str(cache)})
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "not writable" in lines[0] and str(cache / "models") in lines[0], lines
    # a finished folder in a read-only cache is used as it is
    finish(writer(cache / "models" / "tiny", tmp_path / "writes.log"))
    reuse = read_only(
        cache, [sys.executable, "-c", WRITER, str(cache / "models" / "tiny"), str(tmp_path / "r.log"), "0"], env()
    )
    assert reuse.returncode == 0, reuse.stderr[-2000:]
    assert reuse.stdout.strip() == str(cache / "models" / "tiny") and not (tmp_path / "r.log").exists()
