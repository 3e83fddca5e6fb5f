"""`grouprl list`: one line per plug-in table, read from the tables themselves (registry.py)."""

from __future__ import annotations

from grouprl.cli import main
from grouprl.rewards.registry import REWARDS
from grouprl.rollout.generation import BACKENDS
from grouprl.run_config import plugin_registries


def test_list_prints_every_table_and_what_is_registered_now(capsys):
    BACKENDS["recording_test"] = lambda policy, cfg: None  # a backend registered at run time is listed too
    try:
        assert main(["list"]) == 0
    finally:
        del BACKENDS["recording_test"]
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        f"{t.kind} ({t.config_key})" if t.config_key else t.kind for t in plugin_registries()
    ]
    backends = next(line for line in lines if line.startswith("generation backend"))
    assert "hf, recording_test, vllm, vllm_server; or path/to/file.py:make_backend" in backends
    rewards = next(line for line in lines if line.startswith("reward:"))
    assert all(name in rewards for name in REWARDS)
    assert next(line for line in lines if line.startswith("parser")).endswith(
        "hermes, hermes_lenient, llama3_json, mistral"
    )
