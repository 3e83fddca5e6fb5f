"""Conversation episodes: the runner with a real tool template, masks token by token, caps, errors."""

import re

import torch

from grouprl.rewards.reward_calls import episode_messages
from grouprl.rollout.conversation import ConversationSettings, interaction_key, run_conversation_episodes, tool_state
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tasks.tool_arithmetic import expert_reply, rows, ToolAnswerEnv
from grouprl.tools import ToolOutcome, resolve_tools
from grouprl.tools.metrics import tool_metrics
from grouprl.train.conversation_samples import conversation_layout, pack_conversations


def settings(**kw):
    return ConversationSettings(tools=resolve_tools(["calculator", "lookup"]), **kw)


def play(tokenizer, task_rows, reply=expert_reply, group_size=2, max_new_tokens=200, **kw):
    factories = [lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows]
    return run_conversation_episodes(
        factories,
        task_rows,
        group_size,
        ScriptedBackend(tokenizer, reply),
        tokenizer,
        SamplingParams(max_new_tokens=max_new_tokens),
        settings(**kw),
        [r["seed"] for r in task_rows],
    )


def test_expert_conversations_succeed_through_the_real_tools(tokenizer):
    task_rows = rows(6)
    episodes = play(tokenizer, task_rows)
    assert all(ep.success and ep.done and ep.end_reason == "answer" and ep.conversation for ep in episodes)
    for ep, row in zip(episodes, [r for r in task_rows for _ in range(2)]):
        assert len(ep.steps) == (2 if row["kind"] == "multiply" else 3)
        assert ep.steps[0].tool_results[0]["error"] is None
        assert ep.steps[-1].action_text == f"Answer: {row['ground_truth']}"


def test_masks_token_by_token_against_the_template_rendering(tokenizer):
    episodes = play(tokenizer, rows(4), group_size=1)
    step_adv = torch.arange(sum(len(ep.steps) for ep in episodes), dtype=torch.float32) + 1
    samples = pack_conversations(episodes, step_adv, tokenizer.pad_token_id, mask_truncated=False)
    batch, first = samples.batch, 0
    for row, ep in enumerate(episodes):
        # The sequence is exactly the template's rendering of the whole conversation, tools declared.
        text = tokenizer.apply_chat_template(episode_messages(ep), tools=settings().schemas, tokenize=False)
        expected = tokenizer(text, add_special_tokens=False)["input_ids"]
        prompt = batch.prompt_ids[row][batch.prompt_mask[row].bool()].tolist()
        completion = batch.completion_ids[row][batch.attention[row].bool()].tolist()
        assert prompt + completion == expected[: len(prompt) + len(completion)]
        assert tokenizer.decode(expected[len(prompt) + len(completion) :]) == "\n"
        # Trained tokens: exactly each turn's generated ids (eos included), with that turn's advantage.
        mask = batch.completion_mask[row].tolist()
        spans, current = [], []
        for token, m in zip(batch.completion_ids[row].tolist(), mask):
            if m:
                current.append(token)
            elif current:
                spans.append(current)
                current = []
        spans += [current] if current else []
        assert spans[1:] == [s.action_ids for s in ep.steps[1:]]  # turn 0's ids open the completion
        assert batch.completion_ids[row][: len(ep.steps[0].action_ids)].tolist() == ep.steps[0].action_ids
        for span, step in zip(spans, ep.steps):
            assert tokenizer.decode(span) == step.action_text + "<|im_end|>"
        trained = batch.completion_mask[row].bool()
        values = sorted(set(samples.advantages[row][trained].tolist()))
        assert values == [float(first + t + 1) for t in range(len(ep.steps))]
        assert (samples.advantages[row][~trained] == 0).all()
        # Untrained completion tokens are the template's and the tools': none of them was generated.
        untrained = tokenizer.decode(
            [
                t
                for t, m, a in zip(batch.completion_ids[row].tolist(), mask, batch.attention[row].tolist())
                if a and not m
            ]
        )
        assert untrained.count("<tool_response>") == len(ep.steps) - 1 and "<tool_call>" not in untrained
        first += len(ep.steps)


def test_malformed_unknown_and_wrong_calls_are_answered_and_counted(tokenizer):
    turns = iter(
        [
            '<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call>',
            '<tool_call>{"name": "abacus", "arguments": {"expression": "1+1"}}</tool_call>',
            '<tool_call>{"name": "lookup", "arguments": {"units": "mile"}}</tool_call>',
            '<tool_call>{"name": "calculator", "arguments": {"expression": "1/0"}}</tool_call>',
            "Answer: 5",
        ]
    )
    [ep] = play(tokenizer, rows(1), reply=lambda _: next(turns), group_size=1, max_tool_calls=8)
    kinds = [s.tool_results[0]["error"] if s.tool_results else None for s in ep.steps]
    assert kinds == ["malformed", "unknown_tool", "bad_arguments", "raised", None]
    assert [s.valid for s in ep.steps] == [False, False, False, True, True]
    assert all(s.penalty == 0.1 for s in ep.steps[:3])
    assert "unknown tool 'abacus'" in ep.steps[1].tool_results[0]["content"]
    assert ep.end_reason == "answer" and not ep.success
    # the model reads each error as the tool message of the next prompt
    assert "Error: tool 'lookup': unknown argument 'units'" in ep.steps[3].prompt_text
    metrics = tool_metrics([ep])
    assert metrics["tools/calls_per_episode"] == 4 and metrics["tools/invalid_call_rate"] == 0.75
    assert metrics["tools/error_rate"] == 0.25 and metrics["tools/errors/raised"] == 1
    assert metrics["tools/ended/answer"] == 1


def test_bare_json_calls_run_under_hermes_lenient_and_are_counted_apart(tokenizer):
    [row] = [r for r in rows(8) if r["kind"] == "convert"][:1]
    unit = row["question"].split()[-1].rstrip("s?")

    def reply(prompt_text):  # a bare lookup (as untrained Qwen2.5 answers), a tagged calculator call, the answer
        results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt_text, re.DOTALL)
        if not results:
            return '{"name": "lookup", "arguments": {"unit": "%s"}}' % unit
        if len(results) == 1:
            n, f = re.search(r"(\d+) \w+s\?", row["question"]).group(1), re.search(r"= ([\d.]+)", results[0]).group(1)
            return f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{n} * {f}"}}}}</tool_call>'
        return f"Answer: {results[-1]}"

    [ep] = play(tokenizer, [row], reply=reply, group_size=1, parser="hermes_lenient")
    assert [c["form"] for s in ep.steps for c in (s.tool_calls or [])] == ["bare_json", "tagged"]
    assert [r["error"] for s in ep.steps for r in (s.tool_results or [])] == [None, None]
    assert ep.success and ep.end_reason == "answer"
    metrics = tool_metrics([ep])
    assert (metrics["tools/calls_bare_json"], metrics["tools/calls_tagged"]) == (1, 1)
    # the strict parser reads the same bare turn as a (wrong) final answer: no call, nothing counted
    [strict] = play(tokenizer, [row], reply=lambda _: '{"name": "lookup", "arguments": {"unit": "mile"}}', group_size=1)
    assert strict.end_reason == "answer" and not strict.success and len(strict.steps) == 1
    assert (tool_metrics([strict])["tools/calls_bare_json"], tool_metrics([strict])["tools/calls_tagged"]) == (0, 0)


def test_the_caps_end_an_episode(tokenizer):
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "2*3"}}</tool_call>'
    [capped] = play(tokenizer, rows(1), reply=lambda _: call, group_size=1, max_tool_calls=2)
    assert capped.end_reason == "max_tool_calls" and len(capped.steps) == 3 and not capped.done
    [context] = play(
        tokenizer,
        rows(1),
        reply=lambda _: call,
        group_size=1,
        max_tool_calls=50,
        max_conversation_tokens=1300,
        max_new_tokens=100,
    )
    assert context.end_reason == "context"
    assert len(context.steps[-1].prompt_ids) + len(context.steps[-1].action_ids) <= 1300
    [cut] = play(tokenizer, rows(1), reply=lambda _: call, group_size=1, max_new_tokens=20)
    assert cut.end_reason == "truncated" and cut.steps[0].truncated and not cut.steps[0].tool_results


def test_tool_state_anchors():
    a = ToolOutcome("calculator", {"expression": "48 *  2"}, "96")
    b = ToolOutcome("calculator", {"expression": "48*2"}, "96")
    assert interaction_key(a) == interaction_key(b)
    err1 = ToolOutcome("lookup", {"unit": "parsec"}, "Error: unknown unit 'parsec'", "raised")
    err2 = ToolOutcome("lookup", {"unit": "parsec"}, "Error: something else", "raised")
    assert interaction_key(err1) == interaction_key(err2)
    # a set: order and repeats do not change the state
    x, y = interaction_key(a), interaction_key(err1)
    assert tool_state([x, y]) == tool_state([y, x, x]) and tool_state([]) == "start"


def test_anchor_states_of_a_group(tokenizer):
    episodes = play(tokenizer, rows(1), group_size=3)
    states = [[s.anchor_state for s in ep.steps] for ep in episodes]
    assert states[0] == states[1] == states[2] and states[0][0] == "start"
    assert states[0][1].startswith(("calculator(", "lookup("))
    layout = conversation_layout(episodes[0])
    assert layout[2].count(-1) > 0
