"""Training runs judged by a real instruct model: SmolLM2-135M-Instruct behind ``transformers serve`` on
127.0.0.1, one server for the module, started and stopped here.

A 135M model asked for a rubric answers in prose (the last test: its replies are a judge answering
garbage, counted as errors). Forced into the declared format it is a working judge: the judge's
``extra_body`` passes ``logit_bias`` through to the server (a field of the OpenAI schema that
``transformers serve`` implements), +100 on the ten digit tokens, with ``max_tokens: 1`` and
``format: number``, so every reply is the model's own choice of one grade from 0 to 9. The group judge
over a real model, forced by vLLM's structured outputs, is in tests/infra/test_vllm_backend_judge.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from grouprl.cli import main
from judge_standin import ServedProcess, cache_lines, metrics, recipe, train_through_a_restart
from real_model import smollm2_dir  # noqa: F401 - the fixture


pytest.importorskip("openai")

DIGIT_GRADE = """Grade the response to the question below from 0 (wrong) to 9 (correct).

Question:
{{ question }}

Response:
{{ completion }}

Reply with the grade only, one digit."""


@pytest.fixture(scope="module")
def smollm2_server(smollm2_dir, tmp_path_factory):  # noqa: F811 - the fixture above
    serve = Path(sys.executable).parent / "transformers"
    srv = ServedProcess(
        [str(serve), "serve", str(smollm2_dir), "--host", "127.0.0.1", "--port", "{port}", "--device", "cpu"],
        tmp_path_factory.mktemp("serve") / "serve.log",
    )
    srv.start()
    yield srv
    srv.kill()


def forced_judge(smollm2_dir, base_url: str, **options) -> dict:  # noqa: F811
    """The judge reward with SmolLM2's reply forced to one digit token (logit_bias through extra_body)."""
    from transformers import AutoTokenizer

    digits = AutoTokenizer.from_pretrained(str(smollm2_dir)).convert_tokens_to_ids(list("0123456789"))
    return {
        "name": "judge",
        "options": {
            "base_url": base_url,
            "model": str(smollm2_dir),
            "template": DIGIT_GRADE,
            "format": "number",
            "score_range": [0, 9],
            "max_tokens": 1,
            "extra_body": {"logit_bias": {str(t): 100.0 for t in digits}},
            "concurrency": 4,
            "timeout": 60,
            **options,
        },
    }


def test_real_model_forced_into_the_format_judges_a_training_run(
    tiny_arithmetic_dir,
    smollm2_dir,  # noqa: F811
    smollm2_server,
    tmp_path,
):
    out = tmp_path / "run"
    cfg = recipe(tmp_path / "r.yaml", forced_judge(smollm2_dir, smollm2_server.base_url))
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
    assert all(r["reward_errors"] == 0 and r["judge/parse_failures"] == 0 for r in rows)  # every reply a grade
    sent = sum(r["judge/calls"] for r in rows)
    assert sum(r["judge/completion_tokens"] for r in rows) == sent > 0  # one token per reply, as forced
    answered = cache_lines(out, "judge")
    assert len(answered) == sent and all(a["text"] in "0123456789" for a in answered)
    rollouts = [line for line in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 16 and '"judge": null' not in "".join(rollouts)


def test_real_server_killed_mid_run_and_restarted(
    tiny_arithmetic_dir,
    smollm2_dir,
    smollm2_server,  # noqa: F811
    tmp_path,
):
    """SIGKILL ``transformers serve`` once step 2's judgements have begun and start it again on the same
    port (its start and first model load take seconds): the requests meet a dead port, are retried with
    backoff, and the run ends within its error budget with every answer cached once."""
    out = tmp_path / "run"
    reward = forced_judge(smollm2_dir, smollm2_server.base_url, retries=7, backoff_seconds=0.5)
    cfg = recipe(tmp_path / "r.yaml", reward, max_reward_error_fraction=0.25)
    train_through_a_restart(smollm2_server, cfg, tiny_arithmetic_dir, out)


def test_real_instruct_model_as_judge_answers_garbage(
    tiny_arithmetic_dir,
    smollm2_dir,
    smollm2_server,  # noqa: F811
    tmp_path,
    capsys,
):
    """Unforced, SmolLM2 does not follow the rubric's format: every reply that holds no score in range is
    that sample's error; past the budget the run stops, loudly."""
    reward = {
        "name": "judge",
        "options": {
            "base_url": smollm2_server.base_url,
            "model": str(smollm2_dir),
            "format": "number",
            "score_range": [0, 1],
            "max_tokens": 8,
            "concurrency": 4,
            "timeout": 60,
            "retries": 1,
            "cache_dir": str(tmp_path / "cache"),
        },
    }
    out = tmp_path / "run"
    args = ["--model_name_or_path", str(tiny_arithmetic_dir), "--max_steps", "1", "--batch_size", "1"]
    lenient = recipe(tmp_path / "lenient.yaml", reward, max_reward_error_fraction=1.0)
    assert main(["train", "--config", str(lenient), "--output_dir", str(out), *args]) == 0
    row = metrics(out)[0]
    assert row["judge/requests"] == 4 and row["judge/calls"] + row["judge/cache_hits"] >= 1
    assert row["judge/parse_failures"] == row["reward_errors"] > 0  # its prose is counted, never a 0
    assert row["judge/completion_tokens"] > 0  # transformers serve reports usage
    # The default budget (10 %): the same step (same seed, answers from the cache) stops the run.
    strict = recipe(tmp_path / "strict.yaml", reward)
    assert main(["train", "--config", str(strict), "--output_dir", str(tmp_path / "strict"), *args]) != 0
    assert "parse failure" in capsys.readouterr().err
