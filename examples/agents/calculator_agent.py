"""A tool-calling agent written the way anyone writes one: a plain loop over the ``openai`` SDK.

It knows nothing about grouprl. Point it at any OpenAI-compatible server and it runs; name it in a
grouprl recipe (``agent: examples/agents/calculator_agent.py:run``) and grouprl trains the model behind
it, recording every call the loop makes (docs/agents_endpoint.md).

The task rows are tool_arithmetic's (``{"question": "What is 4821 * 97?", "ground_truth": "467637"}``):
the model calls ``calculator`` and ``lookup`` (unit factors) and ends with ``Answer: <number>``. The agent
returns nothing, so grouprl's task judges the last answer; it could as well return its own reward.
"""

from __future__ import annotations

import ast
import json
import operator

SYSTEM_PROMPT = "Use the tools to answer. End with: Answer: <number>"
MAX_TURNS = 4

# The same two tools as grouprl's built-ins, declared in the OpenAI schema.
TOOLS = [
    {"type": "function", "function": {
        "name": "calculator", "description": "Evaluate arithmetic exactly.",
        "parameters": {"type": "object", "properties": {
            "expression": {"type": "string", "description": "e.g. \"4821 * 97\""}}, "required": ["expression"]}}},
    {"type": "function", "function": {
        "name": "lookup", "description": "How many smaller units one unit holds.",
        "parameters": {"type": "object", "properties": {
            "unit": {"type": "string", "description": "e.g. \"mile\""}}, "required": ["unit"]}}},
]

FACTORS = {"mile": (5280, "feet"), "yard": (36, "inches"), "foot": (12, "inches"), "day": (86400, "seconds"),
           "hour": (3600, "seconds"), "week": (168, "hours"), "gallon": (128, "fluid ounces"),
           "pound": (16, "ounces"), "ton": (2000, "pounds"), "kilometer": (1000, "meters"),
           "kilogram": (1000, "grams"), "year": (365, "days")}
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.USub: operator.neg}


def calculator(expression: str) -> str:
    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.operand))
        raise ValueError(f"not arithmetic: {expression!r}")

    result = value(ast.parse(expression, mode="eval").body)
    return str(int(result)) if float(result).is_integer() else str(result)


def lookup(unit: str) -> str:
    key = unit.strip().lower()
    key = "foot" if key == "feet" else key if key in FACTORS else key.rstrip("s")
    if key not in FACTORS:
        raise ValueError(f"unknown unit {unit!r}")
    factor, smaller = FACTORS[key]
    return f"1 {key} = {factor} {smaller}"


def call_tool(name: str, arguments: str) -> str:
    try:
        args = json.loads(arguments)
        return {"calculator": calculator, "lookup": lookup}[name](**args)
    except Exception as err:  # the model's mistake is the model's next observation
        return f"Error: {type(err).__name__}: {err}"


async def run(client, row, model="policy", **_):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": row["question"]}]
    for _turn in range(MAX_TURNS):
        response = await client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return None  # the task judges the last answer
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": call_tool(call.function.name, call.function.arguments)})
    return None
