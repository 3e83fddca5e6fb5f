"""docs/data.md: every YAML block is a valid recipe through the real loader; the example recipe loads."""

from __future__ import annotations

import re

from conftest import REPO_ROOT
from grouprl.run_config import build_config

DOC = REPO_ROOT / "docs" / "data.md"


def test_every_yaml_block_of_the_data_doc_loads(tmp_path):
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 4
    for i, text in enumerate(blocks):
        path = tmp_path / f"block{i}.yaml"
        path.write_text(text)
        cfg = build_config(path, environ={})
        assert cfg.task.task == "prompt_dataset" or i > 0, f"block {i}"


def test_acronym_example_recipe_loads():
    cfg = build_config(REPO_ROOT / "examples" / "acronyms" / "config_acronyms.yaml", environ={})
    assert cfg.task.task == "prompt_dataset" and cfg.data.dataset_prompt_column == "phrase"
    assert cfg.rollout.batch_size == 16 * 2 // 8 and cfg.rollout.max_new_tokens == 6
    assert cfg.task.rewards[0] == "examples/acronyms/acronym_rewards.py:acronym_exact"
