"""A pydantic-ai ``Agent`` on the OpenAI provider, with the client grouprl hands it; ``run_streaming`` streams."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling arith_tools.py

from arith_tools import SYSTEM_PROMPT, calculator, lookup  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402


def _agent(client, model: str) -> Agent:
    return Agent(OpenAIChatModel(model, provider=OpenAIProvider(openai_client=client)), system_prompt=SYSTEM_PROMPT,
                 tools=[calculator, lookup])


async def run(client, row, model, **_):
    await _agent(client, model).run(row["question"])
    return None


async def run_streaming(client, row, model, **_):
    async with _agent(client, model).run_stream(row["question"]) as result:
        async for _text in result.stream_text():
            pass
    return None
