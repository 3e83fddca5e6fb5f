"""The drift check says, per call, merged / split / forked and why, on real episodes through the endpoint: an
append-only agent merges, a compacting one splits (history rewritten), a stop string splits (the answer was cut),
a template that drops earlier <think> blocks splits (handled by the split rule, not refused), a second call from
the same history forks; and ``grouprl agent check`` prints it with what the framework sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from grouprl.rollout.agent.drift import explain_calls, report_lines
from grouprl.rollout.agent.runner import AgentSettings, run_agent_episodes
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tasks.tool_arithmetic import ToolAnswerEnv, expert_reply, rows
from grouprl.user_code import import_callable

ROOT = Path(__file__).resolve().parents[3]
QUESTION = [{"role": "user", "content": "What is 2 * 3?"}]


def checked(tokenizer, agent, reply=expert_reply):
    """Each episode's verdicts, from the records the runner hands ``inspect``."""
    seen = []
    task_rows = rows(1)
    settings = AgentSettings(agent=agent, episode_timeout=60, inspect=lambda eid, calls: seen.append(calls))
    run_agent_episodes(
        [lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows],
        task_rows,
        1,
        ScriptedBackend(tokenizer, reply),
        tokenizer,
        SamplingParams(max_new_tokens=200),
        settings,
        [r["seed"] for r in task_rows],
    )
    (calls,) = seen
    return explain_calls(tokenizer, calls)


def test_an_append_only_agent_merges(tokenizer):
    verdicts = checked(tokenizer, import_callable(f"{ROOT / 'examples/agents/calculator_agent.py'}:run", "agent"))
    assert [v.verdict for v in verdicts][:2] == ["first", "merged"] and "grows from call 0" in verdicts[1].reason
    assert verdicts[0].params["model"] == "'policy'"


def test_a_compacting_agent_splits_with_history_rewritten(tokenizer):
    verdicts = checked(tokenizer, import_callable(f"{ROOT / 'examples/agents/compacting_agent.py'}:run", "agent"))
    split = [v for v in verdicts if v.verdict == "split"]
    assert split and "history rewritten" in split[0].reason and split[0].first_difference.startswith("token ")


async def stops_at_a_string(client, row, model, **_):
    first = await client.chat.completions.create(model=model, messages=QUESTION, stop=["6"])
    history = QUESTION + [{"role": "assistant", "content": first.choices[0].message.content}]
    await client.chat.completions.create(model=model, messages=history + [{"role": "user", "content": "Sure?"}])


def test_a_stop_string_splits_and_says_so(tokenizer):
    v = checked(tokenizer, stops_at_a_string, reply=lambda prompt: "Answer: 6")
    assert [x.verdict for x in v] == ["first", "split"] and "stop" in v[1].reason
    assert "stop=['6']" in ", ".join(f"{k}={val}" for k, val in v[0].params.items())


async def asks_twice(client, row, model, **_):
    first = await client.chat.completions.create(model=model, messages=QUESTION)
    history = QUESTION + [{"role": "assistant", "content": first.choices[0].message.content}]
    for follow_up in ("Sure?", "Why?"):  # two branches from the same history
        await client.chat.completions.create(model=model, messages=history + [{"role": "user", "content": follow_up}])


def test_two_calls_from_one_history_fork(tokenizer):
    v = checked(tokenizer, asks_twice, reply=lambda prompt: "Answer: 6")
    assert [x.verdict for x in v] == ["first", "merged", "forked"]


THINK_DROPPING = (  # Qwen3-style: an earlier assistant turn is rendered without its <think> block
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and not loop.last %}{{ m['content'].split('</think>')[-1] }}"
    "{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


async def thinks(client, row, model, **_):
    first = await client.chat.completions.create(model=model, messages=QUESTION)
    history = QUESTION + [{"role": "assistant", "content": first.choices[0].message.content}]
    await client.chat.completions.create(model=model, messages=history + [{"role": "user", "content": "Sure?"}])


@pytest.fixture
def think_tokenizer(tokenizer):
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = THINK_DROPPING
    return tok


def test_a_template_that_drops_earlier_thinking_splits_by_the_rule(think_tokenizer, monkeypatch):
    from grouprl.rollout.agent import runner

    monkeypatch.setattr(runner, "ensure_tool_template", lambda tokenizer, template: None)  # keep this template
    v = checked(think_tokenizer, thinks, reply=lambda prompt: "<think>2 times 3</think>Answer: 6")
    assert [x.verdict for x in v] == ["first", "split"]
    assert "re-renders earlier turns" in v[1].reason and "think" in v[1].first_difference
    lines = report_lines("g0-e0", v)
    assert lines[0] == "episode g0-e0: 2 call(s)" and any("first differing token" in line for line in lines)


def test_grouprl_agent_check_prints_each_call(tmp_path, capsys):
    from grouprl.cli import main

    agent = f"{ROOT / 'examples/agents/frameworks/openai_streaming.py'}:run"
    assert main(["agent", "check", agent, "--episodes", "1", "--max_new_tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert "episode g0-e0:" in out and "call 0: first" in out and "stream=True" in out
