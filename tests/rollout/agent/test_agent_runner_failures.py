"""An agent that cannot run is loud: the first failure of each kind is printed once, with the agent's own
traceback, and a refused request is named by the endpoint's error code and the parameter it names."""

from __future__ import annotations

import logging

from grouprl.rollout.agent.failures import agent_traceback, failure_summary, raised_message
from grouprl.rollout.agent.runner import AgentSettings, run_agent_episodes
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tasks.tool_arithmetic import ToolAnswerEnv, expert_reply, rows

RUNNER_LOG = "grouprl.rollout.agent.failures"


async def raising_agent(client, row, **extras):
    await client.chat.completions.create(model=extras["model"], messages=[{"role": "user", "content": row["question"]}])
    return helper_that_breaks(row)


def helper_that_breaks(row):
    raise KeyError(f"no column 'answer' in {sorted(row)[:2]}")


async def wrong_model_agent(client, row, **extras):
    await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": row["question"]}])


async def forgiving_agent(client, row, **extras):
    """Swallows the refusal and returns without a served call: a no_calls failure, its refusal counted."""
    try:
        await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": row["question"]}])
    except Exception:  # noqa: BLE001 - the agent's own choice
        return None


def play(tokenizer, settings: AgentSettings, n_rows=2, group_size=2):
    task_rows = rows(n_rows)
    return run_agent_episodes(
        [lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows],
        task_rows,
        group_size,
        ScriptedBackend(tokenizer, expert_reply),
        tokenizer,
        SamplingParams(max_new_tokens=64),
        settings,
        [r["seed"] for r in task_rows],
    )


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == RUNNER_LOG and r.levelno == logging.WARNING]


def test_the_first_failure_of_a_kind_is_printed_once_with_the_agent_s_traceback(tokenizer, caplog):
    settings = AgentSettings(agent=raising_agent, episode_timeout=30)
    with caplog.at_level(logging.WARNING, logger=RUNNER_LOG):
        episodes = play(tokenizer, settings)
        assert all(ep.agent.failure == "agent_raised" for ep in episodes)
        assert episodes[0].agent.message.startswith("KeyError: \"no column 'answer'")
        [printed] = warnings_of(caplog)
        play(tokenizer, settings)  # the next step: the same kind is only counted
    assert warnings_of(caplog) == [printed]
    assert "an agent episode failed (agent_raised): KeyError" in printed
    assert "agent/failed/agent_raised" in printed
    # the agent's own frames, innermost last; none of the runner's, asyncio's or the openai client's
    assert "in raising_agent" in printed and "in helper_that_breaks" in printed
    assert printed.index("in raising_agent") < printed.index("in helper_that_breaks")
    assert "runner.py" not in printed and "asyncio" not in printed
    # another run (its own settings) prints its first failure again
    with caplog.at_level(logging.WARNING, logger=RUNNER_LOG):
        play(tokenizer, AgentSettings(agent=raising_agent, episode_timeout=30), n_rows=1, group_size=1)
    assert len(warnings_of(caplog)) == 2


def test_a_refused_request_is_named_by_its_code_and_parameter(tokenizer, caplog):
    with caplog.at_level(logging.WARNING, logger=RUNNER_LOG):
        episodes = play(tokenizer, AgentSettings(agent=wrong_model_agent, episode_timeout=30))
    run = episodes[0].agent
    assert run.failure == "agent_raised" and run.refused == {"model_not_found": 1} and run.calls == 0
    assert run.message.startswith("the endpoint refused a request: model_not_found (parameter 'model'):")
    assert "gpt-4o" in run.message
    [printed] = warnings_of(caplog)  # the refusal is part of the failure's line, not printed again
    assert "model_not_found (parameter 'model')" in printed and "the endpoint refused: model_not_found x1" in printed
    assert "in wrong_model_agent" in printed


def test_a_refusal_the_agent_swallowed_is_printed_too(tokenizer, caplog):
    with caplog.at_level(logging.WARNING, logger=RUNNER_LOG):
        episodes = play(tokenizer, AgentSettings(agent=forgiving_agent, episode_timeout=30))
    assert {ep.agent.failure for ep in episodes} == {"no_calls"}
    [printed] = warnings_of(caplog)
    assert "(no_calls)" in printed and "the endpoint refused: model_not_found x1" in printed
    assert "traceback" not in printed  # it raised nothing


def test_messages_and_the_batch_summary_are_one_line():
    try:
        raise ValueError("two\nlines  of   text")
    except ValueError as err:
        assert raised_message(err) == "ValueError: two lines of text"
        trace = agent_traceback(err)
    assert "in test_messages_and_the_batch_summary_are_one_line" in trace and trace.endswith("lines  of   text")

    class Run:
        def __init__(self, failure, message, refused=None):
            self.failure, self.message, self.refused = failure, message, refused or {}

    runs = [Run("agent_raised", "KeyError: 'x'"), Run("timeout", "late"), Run("agent_raised", "KeyError: 'y'"), None]
    assert failure_summary(runs) == "agent_raised x2, timeout x1; agent_raised: KeyError: 'x'"
    assert failure_summary([Run(None, "")]) == "no failed episode"
