"""A run closes its vLLM engine at its end (``job/run.py``: ``release_backend``), and a second engine in the same
process (a notebook, a sweep: the next run) then starts clean and generates what the first did. vLLM keeps
process-wide parallel state that an engine's shutdown tears down, so this checks that the teardown of a closed
engine is over before the next one is built, not left to the garbage collector. Skipped where vLLM is not
installed; CI runs it in the vllm venv (``.ci/vllm-venv``)."""

from __future__ import annotations

import string

import pytest

pytest.importorskip("vllm", reason="vLLM not installed (pip install grouprl[vllm]; CI: .ci/vllm-venv)")

from grouprl.models.tiny import init_tiny  # noqa: E402
from grouprl.rollout.backends.vllm import VLLMBackend, VLLMOptions  # noqa: E402
from grouprl.rollout.generation import SamplingParams, release_backend  # noqa: E402


def test_a_closed_engine_leaves_the_next_one_working(tmp_path):
    from transformers import AutoTokenizer

    path = init_tiny(string.printable, tmp_path / "tiny", hidden=128, layers=1, heads=4, seed=2)
    tok = AutoTokenizer.from_pretrained(path)
    params = SamplingParams(max_new_tokens=4, greedy=True)
    first = VLLMBackend(str(path), tok, VLLMOptions(dtype="float32", max_model_len=128))
    expected = first.generate([[5, 6, 7]], params)[0].ids
    release_backend(first)
    second = VLLMBackend(str(path), tok, VLLMOptions(dtype="float32", max_model_len=128))
    try:
        assert second.generate([[5, 6, 7]], params)[0].ids == expected
    finally:
        release_backend(second)
