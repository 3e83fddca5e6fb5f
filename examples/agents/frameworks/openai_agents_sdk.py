"""The OpenAI Agents SDK: its default model (the Responses API), the Chat Completions model, and a streamed run.

Each run uses the client grouprl hands it (the episode's endpoint and key), as the SDK's docs show for a
custom OpenAI-compatible client.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling arith_tools.py

from agents import (  # noqa: E402
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from arith_tools import SYSTEM_PROMPT, calculator, lookup  # noqa: E402

set_tracing_disabled(True)  # no tracing upload from a training run
TOOLS = [function_tool(calculator), function_tool(lookup)]


def _agent(model) -> Agent:
    return Agent(name="arithmetic", instructions=SYSTEM_PROMPT, tools=TOOLS, model=model)


async def run(client, row, model, **_):
    """The SDK's default: the Responses API."""
    await Runner.run(_agent(OpenAIResponsesModel(model=model, openai_client=client)), row["question"], max_turns=4)
    return None


async def run_chat(client, row, model, **_):
    await Runner.run(_agent(OpenAIChatCompletionsModel(model=model, openai_client=client)), row["question"], max_turns=4)
    return None


async def run_streamed(client, row, model, **_):
    result = Runner.run_streamed(_agent(OpenAIResponsesModel(model=model, openai_client=client)), row["question"],
                                 max_turns=4)
    async for _event in result.stream_events():
        pass
    return None
