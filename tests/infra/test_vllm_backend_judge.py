"""LLM judges over vLLM's own OpenAI server (``vllm.entrypoints.openai.api_server``, the CPU build) serving
SmolLM2-135M-Instruct on 127.0.0.1, one server for the module, started and stopped here.

Unforced, a 135M model answers a rubric in prose; the judge's ``extra_body`` passes vLLM's structured
outputs through (``structured_outputs: {regex: ...}``), so the reply is the model's own grade in the
declared format: the default rubric's ``SCORE: <0-10>`` line for the pointwise judge, one ``<n>: <score>``
line per completion for the group judge. Each runs two GRPO steps of the tiny arithmetic policy.

Skipped where vLLM is not installed; CI runs it in the venv made by ``.ci/vllm-venv``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("vllm", reason="vLLM not installed (pip install grouprl[vllm]; CI: .ci/vllm-venv)")
pytest.importorskip("openai")

from judge_standin import ServedProcess, cache_lines, metrics, recipe  # noqa: E402
from real_model import smollm2_dir  # noqa: E402,F401 - the session fixture

from grouprl.cli import main  # noqa: E402
from grouprl.records import Message  # noqa: E402
from grouprl.rewards.learned.judge import build_judge  # noqa: E402

GRADE = "(10|[0-9])"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def vllm_judge(smollm2_dir, tmp_path_factory):  # noqa: F811 - the fixture above
    srv = ServedProcess(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(smollm2_dir),
            "--served-model-name",
            "smollm2",
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--dtype",
            "float32",
            "--max-model-len",
            "1024",
            "--enforce-eager",
        ],
        tmp_path_factory.mktemp("vllm_judge") / "server.log",
        startup_s=300,
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"},
    )
    srv.start()
    yield srv
    srv.kill()


def options(base_url: str, regex: str, **extra) -> dict:
    return {
        "base_url": base_url,
        "model": "smollm2",
        "max_tokens": 40,
        "concurrency": 8,
        "timeout": 60,
        "extra_body": {"structured_outputs": {"regex": regex}},
        **extra,
    }


def test_pointwise_judge_forced_by_structured_outputs(tiny_arithmetic_dir, vllm_judge, tmp_path):
    # Without the regex the same rubric gets prose (no SCORE line within the reply): garbage, counted.
    unforced = build_judge(
        "judge", {**options(vllm_judge.base_url, GRADE, max_tokens=12), "extra_body": None, "cache": False}, None
    )
    conversation = [Message(role="user", content="17+25"), Message(role="assistant", content="42")]
    assert unforced([conversation])[0].error.startswith("parse failure")
    # The shipped recipe's judge (recipes/tiny/arithmetic_judge_vllm.yaml), pointed at this server.
    shipped = yaml.safe_load((REPO / "recipes" / "tiny" / "arithmetic_judge_vllm.yaml").read_text())["rewards"][0]
    assert shipped["options"]["extra_body"] == {"structured_outputs": {"regex": f"SCORE: {GRADE}"}}
    shipped["options"].update(base_url=vllm_judge.base_url, concurrency=8)
    out = tmp_path / "run"
    cfg = recipe(tmp_path / "r.yaml", shipped)
    assert (
        main(
            [
                "train",
                "--config",
                str(cfg),
                "--model_name_or_path",
                str(tiny_arithmetic_dir),
                "--output_dir",
                str(out),
                "--max_steps",
                "2",
            ]
        )
        == 0
    )
    rows = metrics(out)
    assert [r["judge/requests"] for r in rows] == [8, 8]
    assert all(r["reward_errors"] == 0 and r["judge/parse_failures"] == 0 for r in rows)
    answered = cache_lines(out, "judge")
    assert len(answered) == sum(r["judge/calls"] for r in rows) > 0
    assert (
        all(a["text"].startswith("SCORE: ") for a in answered) and sum(r["judge/completion_tokens"] for r in rows) > 0
    )


def test_group_judge_forced_by_structured_outputs(tiny_arithmetic_dir, vllm_judge, tmp_path):
    lines = "\n".join(f"{i}: {GRADE}" for i in range(1, 5))  # num_generations 4: one line per completion
    out = tmp_path / "run"
    cfg = recipe(tmp_path / "r.yaml", {"name": "group_judge", "options": options(vllm_judge.base_url, lines)})
    assert (
        main(
            [
                "train",
                "--config",
                str(cfg),
                "--model_name_or_path",
                str(tiny_arithmetic_dir),
                "--output_dir",
                str(out),
                "--max_steps",
                "2",
            ]
        )
        == 0
    )
    rows = metrics(out)
    assert [r["group_judge/requests"] for r in rows] == [2, 2]  # 2 groups of 4 a step: one call each
    assert all(r["reward_errors"] == 0 and r["group_judge/parse_failures"] == 0 for r in rows)
    answered = cache_lines(out, "group_judge")
    assert len(answered) == sum(r["group_judge/calls"] for r in rows) > 0
    assert all(len(a["text"].splitlines()) == 4 for a in answered)
