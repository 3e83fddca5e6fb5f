"""Every ```python block in docs/rewards.md runs, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "rewards.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_rewards_doc_code_blocks_run():
    blocks = python_blocks(DOC.read_text())
    assert len(blocks) >= 4
    namespace: dict = {}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"{DOC.name}[block {i}]", "exec"), namespace)
        except Exception as err:  # name the block that broke
            raise AssertionError(f"docs/rewards.md python block {i} failed: {err!r}\n{block}") from err
