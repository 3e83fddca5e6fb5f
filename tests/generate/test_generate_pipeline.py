"""``grouprl generate`` against a real OpenAI-compatible server on 127.0.0.1.

The server is ``transformers serve`` (transformers' own FastAPI/uvicorn server) serving a tiny
Qwen2 model built here with ``save_pretrained``; nothing is mocked. The second test kills the
server in the middle of a run, restarts it, reruns the same command and checks that every
(row, generation) is there exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import TINY_HEADS, TINY_HIDDEN, TINY_LAYERS

pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
SERVE = Path(sys.executable).parent / "transformers"
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``transformers serve MODEL`` on a free port; started and stopped (SIGKILL) by the test."""

    def __init__(self, model: Path, log: Path):
        self.model, self.log, self.proc, self.port = model, log, None, None

    def start(self) -> str:
        self.port = free_port()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [str(SERVE), "serve", str(self.model), "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu"],
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1):
                    return f"http://127.0.0.1:{self.port}/v1"
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"transformers serve exited: {self.log.read_text()[-2000:]}")
                time.sleep(0.5)
        raise RuntimeError("transformers serve did not answer /health in 120 s")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the server's own process group (start_new_session)
            self.proc.wait()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from grouprl.models.tiny import init_tiny

    corpus = "".join(WORDS) + "Say: .,!?0123456789 "
    return init_tiny(corpus, tmp_path_factory.mktemp("gen") / "tiny", TINY_HIDDEN, TINY_LAYERS, TINY_HEADS, seed=0)


@pytest.fixture()
def server(tiny_model, tmp_path):
    srv = Server(tiny_model, tmp_path / "serve.log")
    yield srv
    srv.kill()


def write_rows(path: Path, n: int) -> Path:
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": i, "instruction": " ".join(WORDS[(i + j) % 8] for j in range(3))}) + "\n")
    return path


def command(data: Path, base_url: str, out: Path, model: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "grouprl.cli",
        "generate",
        "--dataset",
        str(data),
        "--model",
        str(model),
        "--base_url",
        base_url,
        "--output_dir",
        str(out),
        "--prompt_template",
        "Say: {{ instruction }}",
        "--num_generations",
        "2",
        "--max_new_tokens",
        "12",
        "--temperature",
        "1.0",
        "--concurrency",
        "3",
        "--timeout",
        "30",
        "--no-progress",
        *extra,
    ]


def journal_keys(out: Path) -> list[tuple[int, int]]:
    lines = (out / "requests.jsonl").read_text().splitlines() if (out / "requests.jsonl").is_file() else []
    return [(r["row"], r["k"]) for r in map(json.loads, lines)]


def test_generate_writes_rows_with_generations_and_a_dataset(server, tiny_model, tmp_path):
    import datasets

    base_url = server.start()
    data = write_rows(tmp_path / "rows.jsonl", 6)
    out = tmp_path / "gen"
    run = subprocess.run(command(data, base_url, out, tiny_model), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["requests"] == 12 and summary["done_now"] == 12 and summary["failed"] == 0
    rows = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(6))  # input order and columns kept
    assert all(len(r["generations"]) == 2 and all(isinstance(g, str) for g in r["generations"]) for r in rows)
    assert all(set(r["finish_reasons"]) <= {"stop", "length"} for r in rows)
    assert rows[0]["model_name"] == str(tiny_model)
    on_disk = datasets.load_from_disk(str(out / "dataset"))
    assert on_disk.num_rows == 6 and "generations" in on_disk.column_names
    # A rerun of the finished command sends nothing.
    again = subprocess.run(command(data, base_url, out, tiny_model), capture_output=True, text=True, timeout=120)
    assert json.loads(again.stdout.strip().splitlines()[-1])["done_now"] == 0
    assert len(journal_keys(out)) == 12


def test_server_killed_mid_run_then_rerun_loses_and_duplicates_nothing(server, tiny_model, tmp_path):
    base_url = server.start()
    data = write_rows(tmp_path / "rows.jsonl", 40)
    out = tmp_path / "gen"
    run = subprocess.Popen(
        command(data, base_url, out, tiny_model, "--retries", "1", "--backoff_seconds", "0.2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 180
    while len(journal_keys(out)) < 10 and time.time() < deadline and run.poll() is None:
        time.sleep(0.05)
    assert run.poll() is None, "the run finished before the server could be killed"
    server.kill()  # mid-run: requests in flight and queued now fail
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 1, stderr[-2000:]
    assert "requests failed after 1 retries (rerun the same command" in stderr
    first = journal_keys(out)
    assert 10 <= len(first) < 80 and len(set(first)) == len(first)
    assert not (out / "generations.jsonl").exists()  # incomplete: no final output yet

    base_url = server.start()  # restarted (on a new port: the journal is keyed by the request, not by the server)
    rerun = subprocess.run(command(data, base_url, out, tiny_model), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert summary["done_before"] == len(first) and summary["done_now"] == 80 - len(first)
    keys = journal_keys(out)
    assert len(keys) == 80 and len(set(keys)) == 80  # nothing lost, nothing duplicated
    assert keys[: len(first)] == first  # the first run's answers kept as they were
    rows = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(40)) and all(len(r["generations"]) == 2 for r in rows)


def test_prompt_column_string_or_messages_and_template_errors_name_the_row(tmp_path):
    from grouprl.config import ConfigError
    from grouprl.generate.spec import GenerateSpec, build_messages

    spec = GenerateSpec(dataset="d.jsonl", model="m", base_url="u", output_dir=str(tmp_path), system_prompt="Be brief.")
    assert build_messages(spec, {"prompt": "hi"}, 0) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    chat = [{"role": "system", "content": "own"}, {"role": "user", "content": "hi"}]
    assert build_messages(spec, {"prompt": chat}, 0) == chat  # a message list is used as it is
    with pytest.raises(ConfigError, match="d.jsonl row 3: no prompt column 'prompt'"):
        build_messages(spec, {"text": "hi"}, 3)
    with pytest.raises(ConfigError, match="d.jsonl row 4: prompt is an empty string"):
        build_messages(spec, {"prompt": " "}, 4)
    templated = GenerateSpec(
        dataset="d.jsonl", model="m", base_url="u", output_dir=str(tmp_path), prompt_template="Reverse: {{ word }}"
    )
    assert build_messages(templated, {"word": "abc"}, 0) == [{"role": "user", "content": "Reverse: abc"}]


def test_push_to_hub_uploads_the_jsonl_to_a_private_dataset_repo(tmp_path):
    """``--push_to_hub``: the real huggingface_hub client against the local stand-in of the hub
    (tests/hub_standin.py); the hub itself cannot be reached from here."""
    from hub_standin import serve

    from grouprl.generate.pipeline import push_dataset

    path = tmp_path / "generations.jsonl"
    path.write_text('{"id": 0, "generations": ["a"]}\n')
    server, state = serve()
    try:
        push_dataset(path, "me/gen", f"http://127.0.0.1:{server.server_address[1]}", "hf_test")
    finally:
        server.shutdown()
    repo = state.repos["me/gen"]
    assert repo["private"] and repo["type"] == "dataset"
    assert repo["branches"]["main"][-1]["files"]["data/generations.jsonl"] == path.read_bytes()
