"""A conversation episode in the trajectories file and in ``grouprl view``: turns, calls, results, masks."""

import json
import string

import torch
from rich.console import Console

from grouprl.algos.advantages import get_estimator
from grouprl.observe.step_logs import write_trajectories
from grouprl.observe.viewer import view_trajectories
from grouprl.models.tiny import build_tokenizer
from grouprl.records import Verdict
from grouprl.rollout.conversation import ConversationSettings, run_conversation_episodes
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tasks.tool_arithmetic import ToolAnswerEnv, expert_reply, make_row
from grouprl.tools import resolve_tools
from grouprl.tools.chat_template import TOOL_CHAT_TEMPLATE
from grouprl.train.advantages import compute_advantage_record


def test_trajectories_and_viewer_show_the_conversation(tmp_path):
    tok = build_tokenizer(string.printable)
    tok.chat_template = TOOL_CHAT_TEMPLATE
    row = next(make_row(s) for s in range(50) if make_row(s)["kind"] == "convert")
    episodes = run_conversation_episodes(
        [lambda: ToolAnswerEnv(row["question"], row["ground_truth"])],
        [row],
        2,
        ScriptedBackend(tok, expert_reply),
        tok,
        SamplingParams(max_new_tokens=200),
        ConversationSettings(tools=resolve_tools(["calculator", "lookup"])),
        [0],
    )
    verdicts = [Verdict(score=1.0, step_rewards=[s.env_reward for s in ep.steps]) for ep in episodes]
    algorithm = type("A", (), {"anchor_mode": "exact", "similarity_threshold": 0.95, "gamma": 0.9})()
    record = compute_advantage_record(
        episodes,
        torch.ones(2, dtype=torch.float64),
        [v.step_rewards for v in verdicts],
        algorithm,
        get_estimator("gigpo"),
        {},
    )
    path = tmp_path / "step_000001.jsonl"
    write_trajectories(path, 1, episodes, verdicts, record)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    first, second, last = rows[:3]
    assert first["tool_calls"][0]["name"] == "lookup" and first["anchor_state"] == "start"
    assert first["tool_results"][0]["content"].startswith("1 ") and first["tool_results"][0]["error"] is None
    assert first["masked_prompt_tokens"] == len(episodes[0].steps[0].prompt_ids) and second["masked_prompt_tokens"] == 0
    assert (
        first["masked_tokens_after"]
        == (
            len(episodes[0].steps[1].prompt_ids)
            - len(episodes[0].steps[0].prompt_ids)
            - len(episodes[0].steps[0].action_ids)
        )
        > 0
    )
    assert last["tool_calls"] == [] and last["masked_tokens_after"] == 0 and last["end_reason"] == "answer"
    console = Console(record=True, width=250)
    view_trajectories(path, "g0-e1", console=console)
    text = console.export_text()
    assert "conversation g0-e1" in text and "ended: answer" in text and "lookup(" in text
    assert f"Answer: {row['ground_truth']}" in text and "tool result (masked)" in text
