"""Checkpoint pushes to hub revisions, through the real huggingface_hub client.

The Hugging Face Hub cannot be reached from here (no internet): the client talks to a real HTTP
server on 127.0.0.1 that stands in for the few endpoints used (tests/hub_standin.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hub_standin import serve
from grouprl.hub.revisions import HubPusher, HubRevisionError, HubTarget, step_revision


@pytest.fixture()
def hub():
    server, state = serve()
    yield f"http://127.0.0.1:{server.server_address[1]}", state
    server.shutdown()


def fake_checkpoint(path: Path, step: int) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "qwen2"}')
    (path / "model.safetensors").write_bytes(bytes([step]) * 64)
    (path / "optimizer.pt").write_bytes(b"x" * 128)
    (path / "scheduler.pt").write_bytes(b"s")
    (path / "rng.pt").write_bytes(b"r")
    (path / "trainer_state.json").write_text(f'{{"step": {step}}}')
    return path


def test_step_revision_name():
    assert step_revision("v00.01", 50) == "v00.01-step-000000050"


def test_checkpoints_go_to_step_branches_from_the_initial_commit(hub, tmp_path):
    endpoint, state = hub
    pusher = HubPusher(HubTarget("me/tiny-grpo", revision="v01", endpoint=endpoint, token="hf_test"))
    pusher.push_checkpoint(fake_checkpoint(tmp_path / "checkpoint-2", 2), 2)
    pusher.push_checkpoint(fake_checkpoint(tmp_path / "checkpoint-4", 4), 4)
    pusher.push_final(fake_checkpoint(tmp_path / "final", 9))
    commits = pusher.wait()
    pusher.close()
    assert set(commits) == {"v01-step-000000002", "v01-step-000000004", "main"}
    repo = state.repos["me/tiny-grpo"]
    assert repo["private"]
    initial = repo["branches"]["main"][0]["id"]
    for step in (2, 4):
        branch = repo["branches"][f"v01-step-{step:09d}"]
        assert branch[0]["id"] == initial  # branched from the initial commit
        files = branch[-1]["files"]
        assert files["model.safetensors"] == bytes([step]) * 64  # its own checkpoint, not another's
        assert "optimizer.pt" not in files and "scheduler.pt" not in files and "rng.pt" not in files
        assert files["trainer_state.json"] == f'{{"step": {step}}}'.encode()
    assert repo["branches"]["main"][-1]["files"]["model.safetensors"] == bytes([9]) * 64


def test_existing_revision_is_not_overwritten_unless_asked(hub, tmp_path):
    endpoint, state = hub
    ckpt = fake_checkpoint(tmp_path / "checkpoint-3", 3)
    first = HubPusher(HubTarget("me/run", revision="main", endpoint=endpoint, token="t"))
    first.push_checkpoint(ckpt, 3)
    first.wait()
    again = HubPusher(HubTarget("me/run", revision="main", endpoint=endpoint, token="t"))
    again.push_checkpoint(ckpt, 3)
    with pytest.raises(HubRevisionError, match="revision 'main-step-000000003' exists; set overwrite_hub_revision"):
        again.wait()
    assert len(state.repos["me/run"]["branches"]["main-step-000000003"]) == 2  # initial + the one push
    (ckpt / "model.safetensors").write_bytes(b"new" * 10)
    forced = HubPusher(HubTarget("me/run", revision="main", endpoint=endpoint, token="t", overwrite=True))
    forced.push_checkpoint(ckpt, 3)
    forced.wait()
    assert state.repos["me/run"]["branches"]["main-step-000000003"][-1]["files"]["model.safetensors"] == b"new" * 10


def test_upload_failure_is_raised_by_wait(tmp_path):
    server, _ = serve()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()  # nothing listens any more: every request fails
    pusher = HubPusher(HubTarget("me/gone", endpoint=endpoint, token="t"))
    pusher.push_checkpoint(fake_checkpoint(tmp_path / "c", 1), 1)
    with pytest.raises(HubRevisionError, match="push to 'main-step-000000001' failed"):
        pusher.wait()


def test_a_failed_upload_keeps_its_checkpoint_through_rotation(tmp_path):
    """Rotation spares a checkpoint whose upload failed (its local copy is the only one)."""
    from types import SimpleNamespace

    from grouprl.job.checkpoint_observers import CheckpointRotation, HubPushObserver, checkpoints

    server, _ = serve()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    hub = HubPushObserver(HubPusher(HubTarget("me/gone", endpoint=endpoint, token="t")), True, False)
    rotation = CheckpointRotation(1, hub.busy)
    trainer = SimpleNamespace(out=tmp_path, step=1, run_state={})
    for step in (1, 2):
        trainer.step = step
        path = fake_checkpoint(tmp_path / f"checkpoint-{step}", step)
        hub.after_checkpoint(trainer, path)
        if step == 1:
            hub._pending[1].exception()  # wait for step 1's upload to fail before the next save
        rotation.after_checkpoint(trainer, path)
    assert [p.name for _, p in checkpoints(tmp_path)] == ["checkpoint-1", "checkpoint-2"]
    with pytest.raises(HubRevisionError, match="failed"):
        hub.after_train(trainer)


LOAD_AT_REVISION = """
import json, sys, torch
from grouprl.config import ModelConfig
from grouprl.models.loading import load_policy
p = load_policy(ModelConfig(), "me/tiny", torch.device("cpu"), False, revision=sys.argv[1])
print(json.dumps({"vocab": len(p.tokenizer), "rows": p.model.get_input_embeddings().weight.shape[0],
                  "ids": p.tokenizer("xyz").input_ids}))
"""


def test_model_revision_loads_weights_and_tokenizer_from_that_revision(hub, tmp_path):
    # model_revision pins a hub branch; the tokenizer must come from the same revision as the
    # weights (here v1 has a larger vocabulary), else the same text maps to the wrong rows.
    import json
    import os
    import subprocess
    import sys

    from huggingface_hub import HfApi

    from grouprl.models.tiny import init_tiny

    endpoint, state = hub
    api = HfApi(endpoint=endpoint, token="hf_x")
    api.create_repo("me/tiny")
    api.upload_folder(repo_id="me/tiny", folder_path=str(init_tiny("abc 0123", tmp_path / "a", 32, 1, 4, seed=0)))
    api.create_branch("me/tiny", branch="v1")
    api.upload_folder(
        repo_id="me/tiny",
        revision="v1",
        folder_path=str(init_tiny("xyz 0123 abcdefg", tmp_path / "b", 32, 1, 4, seed=1)),
    )
    env = dict(os.environ, HF_ENDPOINT=endpoint, HF_TOKEN="hf_x", HF_HUB_OFFLINE="0", HF_HOME=str(tmp_path / "hf"))
    loaded = {}
    for revision in ("main", "v1"):
        proc = subprocess.run(
            [sys.executable, "-c", LOAD_AT_REVISION, revision], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        loaded[revision] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded["main"]["vocab"] == loaded["main"]["rows"]
    assert loaded["v1"]["vocab"] == loaded["v1"]["rows"] > loaded["main"]["vocab"]
    assert all(i < loaded["v1"]["rows"] for i in loaded["v1"]["ids"])
    assert any(path.startswith("/me/tiny/resolve/v1/tokenizer") for _, path in state.requests)
