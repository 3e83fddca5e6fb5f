"""Conversation episodes with a real BPE tokenizer (SmolLM2-135M-Instruct, whose template has no tools
section, so the Qwen2.5-format tool template is installed): the turns extend each other token by token,
and the packed sequence reads back as the template's rendering of the whole conversation."""

from __future__ import annotations

from grouprl.models.loading import load_tokenizer
from grouprl.rewards.reward_calls import episode_messages
from grouprl.rollout.conversation import ConversationSettings, run_conversation_episodes
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tasks.tool_arithmetic import ToolAnswerEnv, expert_reply, rows
from grouprl.tools import resolve_tools
from grouprl.tools.chat_template import declares_tools
from grouprl.train.conversation_samples import conversation_layout, pack_conversations
from real_model import smollm2_dir  # noqa: F401 - the session fixture


def test_smollm2_tokenizer_conversations(smollm2_dir):  # noqa: F811
    tok = load_tokenizer(str(smollm2_dir))
    assert not declares_tools(tok.chat_template)
    settings = ConversationSettings(tools=resolve_tools(["calculator", "lookup"]))
    task_rows = rows(4)
    episodes = run_conversation_episodes(
        [lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows],
        task_rows,
        1,
        ScriptedBackend(tok, expert_reply),
        tok,
        SamplingParams(max_new_tokens=200),
        settings,
    )
    assert declares_tools(tok.chat_template)  # auto: installed on the tokenizer
    assert all(ep.success for ep in episodes)
    samples = pack_conversations(
        episodes, __import__("torch").zeros(sum(len(e.steps) for e in episodes)), tok.pad_token_id, mask_truncated=False
    )
    for row, ep in enumerate(episodes):
        prompt, completion, owner = conversation_layout(ep)
        text = tok.apply_chat_template(episode_messages(ep), tools=settings.schemas, tokenize=False)
        assert tok.decode(prompt + completion) + "\n" == text
        trained = [t for t, o in zip(completion, owner) if o >= 0]
        assert trained == [i for s in ep.steps for i in s.action_ids]
        assert int(samples.batch.completion_mask[row].sum()) == len(trained)
