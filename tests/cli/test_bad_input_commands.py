"""Bad input to `grouprl generate`, `eval`, `plot` and `report`: one line, exit 2, through the real CLI
(no server, no model load is reached). A folder with no run must not make an empty report with exit 0."""

from __future__ import annotations

import json

import pytest

from grouprl.cli import main


def _one_line(capsys, code: int) -> str:
    """The error line (lines before it are progress bars of the data loading)."""
    printed = capsys.readouterr().err.strip()
    assert code == 2, printed
    line = printed.splitlines()[-1] if printed else ""
    assert "Traceback" not in printed and line.startswith("grouprl: error: ") and printed.count("grouprl:") == 1, (
        printed
    )
    return line


def _rows(path, n=3):
    path.write_text("".join(json.dumps({"prompt": f"say {i}"}) + "\n" for i in range(n)))
    return path


GENERATE_FLAGS = {
    "base_url": ("not a url", "an http(s) URL"),
    "num_generations": ("0", ">= 1"),
    "max_new_tokens": ("-5", ">= 1"),
    "concurrency": ("0", ">= 1"),
    "retries": ("-1", ">= 0"),
    "max_rows": ("0", ">= 1"),
    "temperature": ("-0.1", ">= 0"),
    "top_p": ("1.5", "in (0, 1]"),
    "timeout": ("0", "> 0 seconds"),
    "backoff_seconds": ("nan", ">= 0 seconds"),
}


@pytest.mark.parametrize("flag", sorted(GENERATE_FLAGS))
def test_generate_flags(flag, tmp_path, capsys):
    value, expected = GENERATE_FLAGS[flag]
    args = {
        "dataset": str(_rows(tmp_path / "rows.jsonl")),
        "model": "m",
        "base_url": "http://127.0.0.1:9/v1",
        "output_dir": str(tmp_path / "out"),
        flag: value,
    }
    err = _one_line(capsys, main(["generate", *[x for k, v in args.items() for x in (f"--{k}", v)], "--no-progress"]))
    assert f"--{flag}" in err and expected in err
    assert not (tmp_path / "out").exists()  # nothing written


def _generate(tmp_path, data, *extra):
    return main(
        [
            "generate",
            "--dataset",
            str(data),
            "--model",
            "m",
            "--base_url",
            "http://127.0.0.1:9/v1",
            "--output_dir",
            str(tmp_path / "out"),
            "--no-progress",
            *extra,
        ]
    )


def test_generate_inputs(tmp_path, capsys):
    rows = _rows(tmp_path / "rows.jsonl")
    assert "missing.jsonl does not exist" in _one_line(capsys, _generate(tmp_path, tmp_path / "missing.jsonl"))
    err = _one_line(capsys, _generate(tmp_path, rows, "--prompt_column", "question"))
    assert "row 0: no prompt column 'question'" in err
    err = _one_line(capsys, _generate(tmp_path, rows, "--prompt_template", "{{ question }}"))
    assert "--prompt_template on" in err and "row 0" in err and "'question' is undefined" in err
    err = _one_line(capsys, _generate(tmp_path, rows, "--prompt_template", "{% if %}"))
    assert "--prompt_template" in err
    (tmp_path / "bad.jsonl").write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    assert "row 2 (line 2) is not UTF-8" in _one_line(capsys, _generate(tmp_path, tmp_path / "bad.jsonl"))
    (tmp_path / "empty.jsonl").write_text("")
    assert "--dataset" in _one_line(capsys, _generate(tmp_path, tmp_path / "empty.jsonl"))
    (tmp_path / "out").write_text("a file")
    assert "a folder (this is a file)" in _one_line(capsys, _generate(tmp_path, rows))


EVAL_FLAGS = {"--n": "0", "--batch_size": "0", "--max_new_tokens": "0", "--temperature": "-1", "--device": "gpu"}


@pytest.mark.parametrize("flag", sorted(EVAL_FLAGS))
def test_eval_flags(flag, tiny_arithmetic_dir, capsys):
    err = _one_line(
        capsys, main(["eval", "--model", str(tiny_arithmetic_dir), "--task", "arithmetic", flag, EVAL_FLAGS[flag]])
    )
    assert f"eval {flag}" in err


def test_eval_paths(tiny_arithmetic_dir, tmp_path, capsys):
    err = _one_line(
        capsys, main(["eval", "--model", str(tiny_arithmetic_dir), "--task", "arithmetic", "--out", str(tmp_path)])
    )
    assert "is a folder" in err
    assert "does not exist" in _one_line(
        capsys, main(["eval", "--model", str(tmp_path / "nope"), "--task", "arithmetic"])
    )
    (tmp_path / "empty_model").mkdir()
    err = _one_line(capsys, main(["eval", "--model", str(tmp_path / "empty_model"), "--task", "arithmetic"]))
    assert "cannot load a model and tokenizer there" in err


def test_plot_inputs(tmp_path, capsys):
    good = tmp_path / "rollouts.jsonl"
    good.write_text(
        "".join(
            json.dumps({"step": s, "prompt_id": "p0", "prompt": "q", "reward": 0.5, "correct": True}) + "\n"
            for s in (1, 2)
        )
    )
    assert "is a folder" in _one_line(capsys, main(["plot", str(tmp_path)]))
    assert "--out" in _one_line(capsys, main(["plot", str(good), "--out", str(tmp_path)]))
    assert "--out" in _one_line(capsys, main(["plot", str(good), "--out", str(tmp_path / "curve.nope")]))
    assert "--prompt_id nope: not in" in _one_line(
        capsys, main(["plot", str(good), "--prompt_id", "nope", "--out", str(tmp_path / "c.png")])
    )
    for name, data in {
        "empty": b"",
        "garbage": b'\xff\xfe\n[1]\n{"step": "x"}\n',
        "no_reward": b'{"step": 1, "prompt_id": "p", "reward": null}\n',
    }.items():
        (tmp_path / f"{name}.jsonl").write_bytes(data)
        err = _one_line(capsys, main(["plot", str(tmp_path / f"{name}.jsonl"), "--out", str(tmp_path / "c.png")]))
        assert "no rollout record" in err
    assert "No such file" in _one_line(capsys, main(["plot", str(tmp_path / "missing.jsonl")]))
    assert main(["plot", str(good), "--out", str(tmp_path / "c.png")]) == 0 and (tmp_path / "c.png").stat().st_size


def test_report_inputs(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "holds no grouprl run" in _one_line(capsys, main(["report", str(empty), "--out", str(tmp_path / "r.html")]))
    assert not (tmp_path / "r.html").exists()
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
    assert "is a folder" in _one_line(capsys, main(["report", str(run), "--out", str(tmp_path)]))
    assert "--max_mb" in _one_line(capsys, main(["report", str(run), "--max_mb", "0"]))
    assert "is a file" in _one_line(capsys, main(["report", str(run / "metrics.jsonl")]))
    assert "no run folder" in _one_line(capsys, main(["report", str(tmp_path / "missing")]))
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 0
