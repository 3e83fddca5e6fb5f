"""The example agent is an ordinary OpenAI-SDK program: the very file grouprl trains runs against a real
OpenAI-compatible server, ``transformers serve`` (transformers' FastAPI/uvicorn server) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from judge_standin import ServedProcess

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
ROOT = Path(__file__).resolve().parents[3]
AGENTS = ROOT / "examples" / "agents"


@pytest.fixture(scope="module")
def served_tool_model(tmp_path_factory):
    """The tiny model with the tool task's vocabulary and the tool chat template, behind transformers serve."""
    from transformers import AutoTokenizer

    from grouprl.models.tiny import init_tiny
    from grouprl.tasks.tool_arithmetic import ToolArithmeticTask, rows
    from grouprl.tools.chat_template import TOOL_CHAT_TEMPLATE

    task = ToolArithmeticTask("tool_arithmetic", rows(2), rows(1))
    out = tmp_path_factory.mktemp("served") / "tiny"
    init_tiny(
        task.tokenizer_corpus(),
        out,
        hidden=32,
        layers=1,
        heads=2,
        seed=0,
        tokenizer=task.tiny_tokenizer,
        max_positions=task.tiny_max_positions,
    )
    tokenizer = AutoTokenizer.from_pretrained(out)
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    serve = Path(sys.executable).parent / "transformers"
    srv = ServedProcess(
        [str(serve), "serve", str(out), "--host", "127.0.0.1", "--port", "{port}", "--device", "cpu"],
        out.parent / "serve.log",
    )
    srv.start()
    yield out, srv.base_url
    srv.kill()


@pytest.mark.parametrize("agent", ["calculator_agent", "compacting_agent"])
def test_the_example_agents_run_unchanged_against_transformers_serve(served_tool_model, agent):
    import openai

    from grouprl.tasks.tool_arithmetic import make_row
    from grouprl.user_code import import_callable

    model, base_url = served_tool_model
    run = import_callable(f"{AGENTS / agent}.py:run", "agent")
    row = make_row(3)

    async def play():
        client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
        try:
            return await run(client, row, model=str(model), base_url=base_url, api_key="unused")
        finally:
            await client.close()

    result = asyncio.run(play())  # the untrained model answers nonsense: judged by the task, or scored 0 by itself
    assert result is None if agent == "calculator_agent" else result == 0.0
