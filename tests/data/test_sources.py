"""A byte that is not UTF-8 in a text dataset is refused in one line, exit 2, naming the file and the
row, before any model loads: one .jsonl/.csv file, a dir of split files, GSM8K's local copy, a slates
dataset. A .parquet file (binary, typed strings) is not scanned."""

from __future__ import annotations

import json

import pytest

from grouprl.data.sources import DatasetSourceError, check_utf8
from run_helpers import train

ROWS = [{"problem": f"What is {i}+{i}?", "solution": str(2 * i)} for i in range(12)]


def _jsonl_bytes(rows, bad_row: int) -> bytes:
    lines = [json.dumps(r).encode() for r in rows]
    lines[bad_row - 1] = lines[bad_row - 1].replace(b"What", b"Wh\xe9t")  # latin-1, not UTF-8
    return b"\n".join(lines) + b"\n"


def _refused(model, tmp_path, capsys, *extra) -> str:
    out = tmp_path / "run"
    assert train(model, out, *extra) == 2
    printed = capsys.readouterr().err.strip()
    assert printed.count("\n") == 0 and "Traceback" not in printed, printed
    assert not (out / "config.json").exists()
    return printed


@pytest.mark.parametrize("layout", ["file.jsonl", "file.csv", "dir/train.jsonl"])
def test_prompt_dataset(layout, tiny_arithmetic_dir, tmp_path, capsys):
    path = tmp_path / layout
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout.endswith(".csv"):
        text = "problem,solution\n" + "".join(f"What is {i}+{i}?,{2 * i}\n" for i in range(12))
        path.write_bytes(text.encode().replace(b"What is 4+4", b"What is 4\xff+4"))
        row = 6  # line 6: the header, then rows 0..4
    else:
        path.write_bytes(_jsonl_bytes(ROWS, 5))
        row = 5
    source = path.parent if layout.startswith("dir/") else path
    err = _refused(
        tiny_arithmetic_dir,
        tmp_path,
        capsys,
        "--task",
        "prompt_dataset",
        "--dataset_name_or_path",
        str(source),
        "--dataset_prompt_column",
        "problem",
        "--rewards",
        "format",
    )
    assert str(path) in err and f"row {row} (line {row}) is not UTF-8 text" in err, err


def test_gsm8k_local_copy(tiny_arithmetic_dir, tmp_path, capsys):
    data = tmp_path / "gsm8k"
    data.mkdir()
    rows = [{"question": f"What is {i}+{i}?", "answer": f"{i}+{i}={2 * i}\n#### {2 * i}"} for i in range(12)]
    (data / "train.jsonl").write_bytes(_jsonl_bytes(rows, 7))
    (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    err = _refused(tiny_arithmetic_dir, tmp_path, capsys, "--task", "gsm8k", "--dataset_name_or_path", str(data))
    assert str(data / "train.jsonl") in err and "row 7 (line 7)" in err and "0xe9" in err, err


def test_check_utf8_names_the_byte(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a": "ok"}\n{"a": "\xc3\x28"}\n')  # a broken two-byte sequence
    with pytest.raises(
        DatasetSourceError,
        match=r"rows.jsonl: row 2 \(line 2\) is not UTF-8 text \(byte 0xc3 at "
        r"column 8\)",
    ):
        check_utf8(path)
    path.write_bytes('{"a": "ünïcödé ✓"}\n'.encode())
    check_utf8(path)
