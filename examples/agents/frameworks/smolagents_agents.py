"""smolagents' ``ToolCallingAgent`` and ``CodeAgent`` on ``OpenAIServerModel``, as smolagents' docs teach them.

smolagents is synchronous: the agent runs in a worker thread so grouprl's other episodes keep going.
"""

from __future__ import annotations

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling arith_tools.py

from arith_tools import calculator, lookup  # noqa: E402
from smolagents import CodeAgent, OpenAIServerModel, ToolCallingAgent, tool  # noqa: E402

TOOLS = [tool(calculator), tool(lookup)]


def _model(model: str, base_url: str, api_key: str) -> OpenAIServerModel:
    return OpenAIServerModel(model_id=model, api_base=base_url, api_key=api_key)


async def run_tool_calling(client, row, model, base_url, api_key, **_):
    agent = ToolCallingAgent(tools=TOOLS, model=_model(model, base_url, api_key), max_steps=3, verbosity_level=0)
    await asyncio.to_thread(agent.run, row["question"])
    return None


async def run_code(client, row, model, base_url, api_key, **_):
    agent = CodeAgent(tools=TOOLS, model=_model(model, base_url, api_key), max_steps=3, verbosity_level=0)
    await asyncio.to_thread(agent.run, row["question"])
    return None
