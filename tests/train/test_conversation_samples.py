"""The update on conversation episodes: one sequence per episode scores each generated token exactly as
the turn's own prompt would, and a learner step trains on it."""

import string

import torch

from grouprl.policy.scoring import completion_logps, pack
from grouprl.models.tiny import build_tiny_model, build_tokenizer
from grouprl.rollout.conversation import ConversationSettings, run_conversation_episodes
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tasks.tool_arithmetic import ToolAnswerEnv, expert_reply, rows
from grouprl.tools import resolve_tools
from grouprl.tools.chat_template import TOOL_CHAT_TEMPLATE
from grouprl.train.conversation_samples import pack_conversations


def episodes_and_model():
    tok = build_tokenizer(string.printable)
    tok.chat_template = TOOL_CHAT_TEMPLATE
    task_rows = rows(3)
    episodes = run_conversation_episodes(
        [lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows],
        task_rows,
        1,
        ScriptedBackend(tok, expert_reply),
        tok,
        SamplingParams(max_new_tokens=200),
        ConversationSettings(tools=resolve_tools(["calculator", "lookup"])),
    )
    model = build_tiny_model(tok, hidden=32, layers=2, heads=2, seed=0, max_positions=2048).eval()
    return tok, episodes, model


def test_one_sequence_scores_each_turn_as_its_own_prompt_does():
    tok, episodes, model = episodes_and_model()
    n_steps = sum(len(ep.steps) for ep in episodes)
    samples = pack_conversations(episodes, torch.zeros(n_steps), tok.pad_token_id, mask_truncated=False)
    steps = [s for ep in episodes for s in ep.steps]
    per_turn = pack([s.prompt_ids for s in steps], [s.action_ids for s in steps], tok.pad_token_id)
    with torch.no_grad():
        once, _ = completion_logps(model, samples.batch)
        separately, _ = completion_logps(model, per_turn)
    k = 0
    for row, ep in enumerate(episodes):
        trained = once[row][samples.batch.completion_mask[row].bool()]
        expected = torch.cat([separately[k + t][: len(s.action_ids)] for t, s in enumerate(ep.steps)])
        torch.testing.assert_close(trained, expected, atol=2e-5, rtol=1e-4)
        k += len(ep.steps)
    assert samples.batch.completion_mask.sum() == sum(len(s.action_ids) for s in steps)
    assert len(samples.batch) == len(episodes)  # one sample per episode, not per turn
