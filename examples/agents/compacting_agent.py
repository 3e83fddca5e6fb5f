"""The calculator agent with history compaction: before each call it rewrites its chat so that all the
tool calls made so far sit in ONE assistant turn, followed by their results.

Agents do this (summaries, dropped scratch turns, sub-agents) to keep their context short. Its calls
then no longer extend each other token for token, so grouprl trains each call as its own sample, all
sharing the episode's reward (docs/agents_endpoint.md, "merged and split episodes"). It also scores
itself: it returns 1.0 when the last answer is right, instead of leaving the judgement to the task.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling file, imported as a plain module
from calculator_agent import MAX_TURNS, SYSTEM_PROMPT, TOOLS, call_tool  # noqa: E402


async def run(client, row, model="policy", **_):
    question = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": row["question"]}]
    calls, results = [], []  # every tool call so far and its result message
    for _turn in range(MAX_TURNS):
        history = question + ([{"role": "assistant", "content": "", "tool_calls": calls}] + results if calls else [])
        response = await client.chat.completions.create(model=model, messages=history, tools=TOOLS)
        message = response.choices[0].message
        if not message.tool_calls:
            found = re.findall(r"Answer:\s*(-?\d+)", message.content or "")
            return 1.0 if found and found[-1] == row["ground_truth"] else 0.0
        for call in message.tool_calls:
            calls.append({"id": call.id, "type": "function",
                          "function": {"name": call.function.name, "arguments": call.function.arguments}})
            results.append({"role": "tool", "tool_call_id": call.id,
                            "content": call_tool(call.function.name, call.function.arguments)})
    return 0.0
