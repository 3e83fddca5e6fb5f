"""Every code block in docs/rewards.md and docs/agents.md runs: Python blocks in order in one
namespace, YAML blocks as recipes through the real config loader, and bash blocks as real commands."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from grouprl.run_config import build_config

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "rewards.md"


AGENTS = ROOT / "docs" / "agents.md"


def blocks(lang: str, doc: Path = DOC) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", doc.read_text(), flags=re.DOTALL)


def test_agents_doc_python_blocks_run():
    from grouprl.rewards import registry

    code = blocks("python", AGENTS)
    assert len(code) >= 4
    namespace: dict = {}
    try:
        for i, block in enumerate(code):
            try:
                exec(compile(block, f"{AGENTS.name}[python block {i}]", "exec"), namespace)
            except Exception as err:
                raise AssertionError(f"docs/agents.md python block {i} failed: {err!r}\n{block}") from err
    finally:
        registry.REWARDS.pop("move_cost", None)


def test_rewards_doc_python_blocks_run():
    code = blocks("python")
    assert len(code) >= 4
    namespace: dict = {}
    for i, block in enumerate(code):
        try:
            exec(compile(block, f"{DOC.name}[python block {i}]", "exec"), namespace)
        except Exception as err:  # name the block that broke
            raise AssertionError(f"docs/rewards.md python block {i} failed: {err!r}\n{block}") from err


def test_rewards_doc_yaml_blocks_are_valid_recipes(tmp_path):
    recipes = blocks("yaml")
    assert len(recipes) >= 2
    for i, text in enumerate(recipes):
        path = tmp_path / f"recipe{i}.yaml"
        path.write_text(text)
        cfg = build_config(path, environ={})
        assert cfg.task.rewards, yaml.safe_load(text)


def test_rewards_doc_bash_blocks_run(tmp_path):
    commands = [line for block in blocks("bash") for line in block.splitlines() if line.strip()]
    assert commands
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "grouprl", command
        argv = [a.replace("scores.jsonl", str(tmp_path / "scores.jsonl")) for a in argv]
        done = subprocess.run(
            [sys.executable, "-m", "grouprl.cli", *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    assert (tmp_path / "scores.jsonl").read_text().count("\n") == 6
