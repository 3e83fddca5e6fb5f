"""The tool task's rows and its tiny tokenizer: fixed-width numbers, every conversation token known."""

from grouprl.policy.tiny_words import build_word_tokenizer
from grouprl.rollout.conversation import ConversationSettings, run_conversations
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tasks.tool_arithmetic import ToolAnswerEnv, ToolArithmeticTask, expert_reply, rows
from grouprl.tools import resolve_tools


def test_rows_have_fixed_width_numbers():
    for row in rows(300):
        numbers = [w.strip("?") for w in row["question"].split() if w.strip("?").isdigit()]
        if row["kind"] == "multiply":
            assert [len(n) for n in numbers] == [4, 2] and len(row["ground_truth"]) == 6
        else:
            assert [len(n) for n in numbers] == [2]
        assert int(row["ground_truth"]) > 0


def test_word_digit_tokenizer_reads_every_expert_conversation_without_unknowns():
    task = ToolArithmeticTask("tool_arithmetic", rows(2), rows(2))
    tok = build_word_tokenizer(task.tokenizer_corpus(), split_digits=True)
    assert tok.convert_ids_to_tokens(tok("What is 4821 * 97", add_special_tokens=False)["input_ids"]) == \
        ["What", " is", " ", "4", "8", "2", "1", " *", " ", "9", "7"]
    task_rows = rows(40, 5_000)
    episodes = run_conversations([lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows],
                                 task_rows, 1, ScriptedBackend(tok, expert_reply), tok,
                                 SamplingParams(max_new_tokens=200),
                                 ConversationSettings(tools=resolve_tools(["calculator", "lookup"])))
    assert all(ep.success for ep in episodes)
    for ep in episodes:
        ids = ep.steps[-1].prompt_ids + ep.steps[-1].action_ids
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == ep.steps[-1].prompt_text + ep.steps[-1].action_text + "<|im_end|>"
        assert len(ids) < 500  # ~3x fewer tokens than characters
