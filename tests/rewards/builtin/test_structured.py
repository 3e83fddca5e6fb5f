"""Built-in structured rewards: json_schema, tool_call_match, code_execution (real sandbox)."""

from __future__ import annotations

import json

import pytest

from grouprl.records import EvaluateResult
from grouprl.rewards.builtin.structured import BUILTIN_STRUCTURED, code_execution, json_schema, tool_call_match


def convo(completion: str, **assistant_fields) -> list[dict]:
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Please answer."},
        {"role": "assistant", "content": completion, **assistant_fields},
    ]


# --------------------------------------------------------------------------- json_schema

PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "email": {"type": "string"},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}

VALID_FENCED = """Sure! Here is the extracted record:

```json
{
  "name": "Ada Lovelace",
  "age": 36,
  "email": "ada@example.org"
}
```

Let me know if you need anything else."""

WRONG_TYPE = """```json
{"name": "Alan Turing", "age": "forty-one"}
```"""


def test_json_schema_valid_fenced_block_with_schema_kwarg():
    r = json_schema(convo(VALID_FENCED), schema=PERSON_SCHEMA)
    assert isinstance(r, EvaluateResult)
    assert r.score == 1.0 and r.reason


def test_json_schema_whole_text_with_schema_as_ground_truth_json_string():
    r = json_schema(
        convo('{"name": "Grace Hopper", "age": 85}'), ground_truth=json.dumps(PERSON_SCHEMA), unrelated_field="ignored"
    )
    assert r.score == 1.0


def test_json_schema_invalid_names_the_error():
    r = json_schema(convo(WRONG_TYPE), schema=PERSON_SCHEMA)
    assert r.score == 0.0
    assert "age" in r.reason and "integer" in r.reason

    r = json_schema(convo('{"name": "Linus"}'), schema=PERSON_SCHEMA)
    assert r.score == 0.0 and "'age' is a required property" in r.reason


def test_json_schema_unparsable():
    r = json_schema(convo("The name is Ada and she is 36 years old."), schema=PERSON_SCHEMA)
    assert r.score == 0.0 and "unparsable" in r.reason
    r = json_schema(convo('```json\n{"name": "Ada", "age": 36,,}\n```'), schema=PERSON_SCHEMA)
    assert r.score == 0.0 and "does not parse" in r.reason


def test_json_schema_without_schema_is_no_opinion():
    r = json_schema(convo('{"a": 1}'))
    assert r.is_score_valid is False and r.reason


# --------------------------------------------------------------------------- tool_call_match

EXPECTED_CALLS = [
    {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
    {"name": "get_time", "arguments": {"timezone": "Europe/Paris"}},
]


def test_tool_calls_exact_match_from_message_tool_calls_openai_shape():
    # OpenAI shape, arguments as a JSON string with a different key order.
    calls = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_time", "arguments": '{"timezone": "Europe/Paris"}'},
        },
        {
            "id": "call_2",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"unit": "celsius", "city": "Paris"}'},
        },
    ]
    r = tool_call_match(convo("", tool_calls=calls), ground_truth=json.dumps(EXPECTED_CALLS))
    assert r.score == 1.0 and r.reason
    r = tool_call_match(convo("", tool_calls=calls), ground_truth=EXPECTED_CALLS, mode="jaccard")
    assert r.score == 1.0


def test_tool_calls_partial_jaccard_from_completion_json():
    # One call right, one with a wrong argument, one extra call.
    completion = """I'll look that up.
```json
[
  {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
  {"name": "get_time", "arguments": {"timezone": "Europe/London"}},
  {"name": "search_web", "arguments": {"query": "Paris events"}}
]
```"""
    exact = tool_call_match(convo(completion), ground_truth=EXPECTED_CALLS)
    assert exact.score == 0.0
    r = tool_call_match(convo(completion), ground_truth=EXPECTED_CALLS, mode="jaccard")
    # pairs: A = {weather(Paris,c), time(London), search}, B = {weather(Paris,c), time(Paris)}
    # |A∩B| = 1, |A∪B| = 4
    assert r.score == pytest.approx(1 / 4)
    # names: A = {get_weather, get_time, search_web}, B = {get_weather, get_time}: 2 / 3
    assert r.metrics["name_jaccard"].score == pytest.approx(2 / 3)
    assert "get_time" in r.reason


def test_tool_calls_single_object_wrong_name():
    completion = '{"name": "get_forecast", "arguments": {"city": "Paris", "unit": "celsius"}}'
    truth = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
    r = tool_call_match(convo(completion), ground_truth=truth)
    assert r.score == 0.0
    r = tool_call_match(convo(completion), ground_truth=truth, mode="jaccard")
    assert r.score == 0.0 and r.metrics["name_jaccard"].score == 0.0
    assert "get_weather" in r.reason


def test_tool_calls_unparsable_completion():
    r = tool_call_match(convo("I would call the weather tool for Paris."), ground_truth=EXPECTED_CALLS)
    assert r.score == 0.0 and "no parsable tool calls" in r.reason


# --------------------------------------------------------------------------- code_execution

SUM_CASES = [
    {"input": "3\n1 2 3\n", "output": "6\n"},
    {"input": "1\n-5\n", "output": "-5"},
    {"input": "4\n10 20 30 40\n", "output": "100\n"},
]

GOOD_CODE = """To sum the numbers, read n and then the list:

```python
import sys

def main():
    data = sys.stdin.read().split()
    n = int(data[0])
    print(sum(int(x) for x in data[1:1 + n]))

main()
```
This runs in O(n)."""

# Bug: for n == 1 it prints abs(x), so the negative single-number case fails (2 of 3 pass).
TWO_OF_THREE = """```python
n = int(input())
nums = list(map(int, input().split()))
print(sum(nums) if n > 1 else abs(nums[0]))
```"""

INFINITE = """Let me think... I'll loop until done:
```python
n = int(input())
while True:
    n += 1
```"""


def test_code_execution_all_pass():
    r = code_execution(convo(GOOD_CODE), ground_truth=SUM_CASES)
    assert r.score == 1.0
    assert "3/3" in r.reason


def test_code_execution_two_of_three_and_json_string_cases():
    r = code_execution(convo(TWO_OF_THREE), ground_truth=json.dumps(SUM_CASES))
    assert r.score == pytest.approx(2 / 3)
    assert "case 1" in r.reason and "wrong output" in r.reason
    assert r.metrics["case_1"].score == 0.0


def test_code_execution_assert_cases_from_kwarg():
    completion = "```python\ndef add(a, b):\n    return a + b\n```"
    r = code_execution(
        convo(completion), test_cases=["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 5"]
    )
    assert r.score == pytest.approx(2 / 3)
    assert "AssertionError" in r.reason


def test_code_execution_timeout_fails_case_and_returns():
    cases = [{"input": "1\n", "output": "2\n"}, {"input": "2\n", "output": "3\n"}]
    r = code_execution(convo(INFINITE), ground_truth=cases, timeout=1)
    assert r.score == 0.0
    assert "timeout" in r.reason


def test_code_execution_no_code_block():
    r = code_execution(convo("The answer is to sum the numbers: print(sum(nums))"), ground_truth=SUM_CASES)
    assert r.score == 0.0 and "no ```python code block" in r.reason


def test_code_execution_binary_threshold():
    r = code_execution(convo(TWO_OF_THREE), ground_truth=SUM_CASES, binary=True)
    assert r.score == 0.0 and "binary" in r.reason
    r = code_execution(convo(TWO_OF_THREE), ground_truth=SUM_CASES, binary=True, threshold=0.6)
    assert r.score == 1.0


def test_registry_table_names_typed_functions():
    assert set(BUILTIN_STRUCTURED) == {"json_schema", "tool_call_match", "code_execution"}
    assert all(fn.reward_mode == "pointwise" for fn in BUILTIN_STRUCTURED.values())
