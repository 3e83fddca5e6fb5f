"""A LangGraph prebuilt ReAct agent on ``ChatOpenAI``, as LangGraph's docs teach it; ``run_streaming`` streams.

grouprl hands ``run`` the episode's ``base_url`` and ``api_key``; the agent builds its own chat model from them.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling arith_tools.py

from arith_tools import SYSTEM_PROMPT, calculator, lookup  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402

TOOLS = [tool(calculator), tool(lookup)]


def _agent(model: str, base_url: str, api_key: str, streaming: bool = False):
    llm = ChatOpenAI(model=model, base_url=base_url, api_key=api_key, max_retries=0, streaming=streaming)
    return create_react_agent(llm, TOOLS, prompt=SYSTEM_PROMPT)


async def run(client, row, model, base_url, api_key, **_):
    agent = _agent(model, base_url, api_key)
    await agent.ainvoke({"messages": [("user", row["question"])]}, {"recursion_limit": 8})
    return None  # the task judges the last answer the model gave


async def run_streaming(client, row, model, base_url, api_key, **_):
    agent = _agent(model, base_url, api_key, streaming=True)
    async for _chunk in agent.astream({"messages": [("user", row["question"])]}, {"recursion_limit": 8},
                                      stream_mode="messages"):
        pass
    return None
