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
