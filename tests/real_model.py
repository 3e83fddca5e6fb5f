"""The real pretrained model the real-model tests share: SmolLM2-135M-Instruct from its package.

Materialised once into the user's model cache (``~/.cache/grouprl/models``; the conftest clears
GROUPRL_* variables, so not $GROUPRL_CACHE) and reused by later sessions, the vLLM venv's included.
The tests skip only where the package can neither be found nor installed, and say so.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grouprl.policy.pretrained import KNOWN_MODELS, PretrainedModelError, find_or_install_gguf, materialize_pretrained

SMOLLM2 = "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    spec = KNOWN_MODELS[SMOLLM2]
    try:
        find_or_install_gguf(spec)
    except PretrainedModelError as err:
        pytest.skip(f"package {spec.package} cannot be installed here, so no real model: {err}")
    cache = Path.home() / ".cache" / "grouprl" / "models"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        writable = os.access(cache, os.W_OK)
    except OSError:
        writable = False
    out = (cache if writable else tmp_path_factory.mktemp("models")) / SMOLLM2
    return materialize_pretrained(SMOLLM2, out)
