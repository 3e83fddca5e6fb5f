"""An agent run's progress is counted in episodes and in the tokens of every call: the decode loop's own report
is per generate call (one turn of whichever agents were waiting), which for agents read "49/200" then "0/200"."""

from __future__ import annotations

from pathlib import Path

import torch

from grouprl.models.tiny import build_tiny_model, build_tokenizer
from grouprl.rollout.agent.run_progress import RunProgress
from grouprl.rollout.agent.runner import AgentSettings, run_agent_episodes
from grouprl.rollout.generation import HFBackend, SamplingParams
from grouprl.tasks.tool_arithmetic import ToolAnswerEnv, ToolArithmeticTask, rows
from grouprl.user_code import import_callable

CALCULATOR = str(Path(__file__).resolve().parents[3] / "examples" / "agents" / "calculator_agent.py") + ":run"


def test_a_run_reports_episodes_done_and_every_call_s_tokens():
    task = ToolArithmeticTask("tool_arithmetic", rows(4), rows(1))
    tokenizer = build_tokenizer(task.tokenizer_corpus())
    model = build_tiny_model(tokenizer, hidden=32, layers=1, heads=4, seed=0, max_positions=2048)
    task_rows = rows(6)
    seen: list[tuple[int, int, int]] = []
    params = SamplingParams(max_new_tokens=24, batch_size=4, progress=lambda *r: seen.append(r))  # 3 waves of 4
    episodes = run_agent_episodes(
        [lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows],
        task_rows,
        2,
        HFBackend(model, tokenizer, torch.device("cpu")),
        tokenizer,
        params,
        AgentSettings(agent=import_callable(CALCULATOR, "agent")),
        [r["seed"] for r in task_rows],
    )
    assert len(episodes) == 12 and all(ep.agent.failure is None for ep in episodes)
    done, totals, tokens = zip(*seen)
    assert set(totals) == {12}
    assert list(done) == sorted(done) and done[-1] == 12  # episodes, never a call's rows
    assert list(tokens) == sorted(tokens)  # summed over the calls, not restarting with each
    assert tokens[-1] == sum(len(s.action_ids) for ep in episodes for s in ep.steps)


def test_a_call_s_tokens_are_banked_when_it_ends():
    seen: list[tuple[int, int, int]] = []
    progress = RunProgress(lambda *r: seen.append(r), total=3)
    first = progress.call_params(SamplingParams())
    first.progress(1, 2, 5)
    first.progress(2, 2, 9)
    progress.call_ended()
    progress.episode_ended()
    second = progress.call_params(SamplingParams())
    second.progress(1, 1, 4)
    assert seen == [(0, 3, 5), (0, 3, 9), (1, 3, 9), (1, 3, 13)]
