"""The plain ``openai`` SDK loop of ``calculator_agent.py``, streamed: each turn arrives as chunks."""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling arith_tools.py

from arith_tools import SYSTEM_PROMPT, calculator, lookup  # noqa: E402

TOOLS = [
    {"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic exactly.",
     "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}},
    {"type": "function", "function": {"name": "lookup", "description": "How many smaller units one unit holds.",
     "parameters": {"type": "object", "properties": {"unit": {"type": "string"}}, "required": ["unit"]}}},
]


async def run(client, row, model="policy", **_):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": row["question"]}]
    for _turn in range(4):
        content, calls = "", {}
        stream = await client.chat.completions.create(model=model, messages=messages, tools=TOOLS, stream=True)
        async for chunk in stream:
            delta = chunk.choices[0].delta if chunk.choices else None
            if delta is None:
                continue
            content += delta.content or ""
            for call in delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] += call.id or ""
                slot["name"] += (call.function.name or "") if call.function else ""
                slot["arguments"] += (call.function.arguments or "") if call.function else ""
        message = {"role": "assistant", "content": content or None}
        if calls:
            message["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for c in calls.values()]
        messages.append(message)
        if not calls:
            return None
        for c in calls.values():
            tools = {"calculator": calculator, "lookup": lookup}
            try:
                result = tools[c["name"]](**json.loads(c["arguments"]))
            except Exception as err:  # the model's mistake is its next observation
                result = f"Error: {type(err).__name__}: {err}"
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})
    return None
