"""docs/agents_endpoint.md: its recipe block is a valid recipe naming a real agent file, and the metric
names and error codes it lists are the ones the code produces."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from grouprl.run_config import build_config

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "agents_endpoint.md"


def test_the_recipe_block_loads_and_names_a_real_agent(tmp_path):
    (block,) = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(block)
    cfg = build_config(recipe, {}, environ={})
    path, _, function = cfg.tools.agent.rpartition(":")
    assert (ROOT / path).is_file() and function == "run"
    assert (cfg.tools.max_calls, cfg.tools.episode_timeout) == (4, 300)
    shipped = yaml.safe_load((ROOT / "recipes" / "tiny" / "tool_arithmetic_agent.yaml").read_text())
    assert shipped["tools"]["agent"] == cfg.tools.agent


def test_the_documented_names_are_the_code_s():
    from grouprl.rollout.agent import serving as agent_serving
    from grouprl.rollout.agent.runner import FAILURES

    text = DOC.read_text()
    assert all(f"`{kind}`" in text for kind in FAILURES)
    codes = set(re.findall(r'EndpointError\(\d+, "(\w+)"', Path(agent_serving.__file__).read_text()))
    codes |= {"max_calls_exceeded", "episode_closed", "invalid_api_key"}
    assert codes - {"server_error", "server_timeout"} <= set(re.findall(r"`(\w+)`", text))
