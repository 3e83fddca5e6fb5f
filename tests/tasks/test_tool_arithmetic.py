"""The tool task's rows and its tiny tokenizer: fixed-width numbers, every conversation token known."""

import pytest

from grouprl.config import ConfigError
from grouprl.models.tiny_words import build_word_tokenizer
from grouprl.records import Episode, Step
from grouprl.run_config import build_config
from grouprl.tasks import load_task
from grouprl.rollout.conversation import ConversationSettings, run_conversation_episodes
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tasks.tool_arithmetic import (
    _CONVERT,
    ToolAnswerEnv,
    ToolArithmeticTask,
    expert_reply,
    rows,
    step_kind_metrics,
)
from grouprl.tools import resolve_tools
from grouprl.tools.builtin import UNIT_FACTORS


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
    assert tok.convert_ids_to_tokens(tok("What is 4821 * 97", add_special_tokens=False)["input_ids"]) == [
        "What",
        " is",
        " ",
        "4",
        "8",
        "2",
        "1",
        " *",
        " ",
        "9",
        "7",
    ]
    task_rows = rows(40, 5_000)
    episodes = run_conversation_episodes(
        [lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows],
        task_rows,
        1,
        ScriptedBackend(tok, expert_reply),
        tok,
        SamplingParams(max_new_tokens=200),
        ConversationSettings(tools=resolve_tools(["calculator", "lookup"])),
    )
    assert all(ep.success for ep in episodes)
    for ep in episodes:
        ids = ep.steps[-1].prompt_ids + ep.steps[-1].action_ids
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == ep.steps[-1].prompt_text + ep.steps[-1].action_text + "<|im_end|>"
        assert len(ids) < 500  # ~3x fewer tokens than characters


def test_convert_only_rows_are_the_mixed_rows_of_their_kind():
    mixed, convert, multiply = rows(200), rows(200, 0, "convert"), rows(200, 0, "multiply")
    assert {r["kind"] for r in convert} == {"convert"} and {r["kind"] for r in multiply} == {"multiply"}
    assert len({r["question"] for r in convert}) > 150  # many distinct chains, not a handful
    for m, c, p in zip(mixed, convert, multiply):
        assert m == (c if m["kind"] == "convert" else p)  # a seed is the same question whatever the filter
    for r in convert:
        n, unit = _CONVERT.search(r["question"]).groups()
        assert r["ground_truth"] == str(int(n) * UNIT_FACTORS[unit][0])


def test_a_wrong_question_kind_is_one_clear_line():
    with pytest.raises(ValueError, match="tool_questions is 'conversions'; expected one of mixed, multiply, convert"):
        rows(1, 0, "conversions")


def test_the_recipe_key_builds_a_conversion_only_task_and_its_expert_traces(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "task: {task: tool_arithmetic, tool_questions: convert, n_train: 8}\n"
        "tools: {episode_mode: conversation, tools: [calculator, lookup]}\neval: {n_eval: 5}\n"
    )
    task = load_task(build_config(recipe, {}))
    assert {r["kind"] for r in task.train_rows + task.eval_rows + task.sft_rows(20)} == {"convert"}
    with pytest.raises(ConfigError, match="tool_questions"):
        build_config(recipe, {"tool_questions": "everything"})


@pytest.mark.parametrize(
    "answer, right",
    [
        ("Answer: 79200", True),
        ("I computed it.\nAnswer: 79200.", True),  # a full stop ends the sentence, not the number
        ("Answer: 79200.5", False),  # the integer part of a decimal is not the answer
        ("Answer: 792000", False),
        ("Answer: 079200", False),
        ("Answer: -79200", False),
        ("79200", False),  # no 'Answer:' line
        ("Answer: 79200\nAnswer: 1", False),  # the last answer counts
        ("Answer: 1\nAnswer: 79200", True),
        ("Answer: 79200e3", False),
        ("Answer:", False),
        ("", False),
    ],
)
def test_the_judge_against_adversarial_answers(answer, right):
    env = ToolAnswerEnv("How many feet are in 15 miles?", "79200")
    env.reset(0)
    result = env.step(answer)
    assert result.info["success"] is right and result.reward == (1.0 if right else 0.0)


def test_each_step_of_the_chain_is_measured_on_the_tool_results_it_saw(tokenizer):
    task_rows = rows(6, 0, "convert")

    def stop_after(turns):
        def reply(prompt):
            done = prompt.count("<tool_response>")
            return expert_reply(prompt) if done < turns else "Answer: 7"

        return reply

    settings = ConversationSettings(tools=resolve_tools(["calculator", "lookup"]))
    measured = {}
    for turns in (0, 1, 2):  # answer at once; after the lookup; after the calculator (the full chain, wrong answer)
        episodes = run_conversation_episodes(
            [lambda r=r: ToolAnswerEnv(r["question"], r["ground_truth"]) for r in task_rows],
            task_rows,
            1,
            ScriptedBackend(tokenizer, stop_after(turns)),
            tokenizer,
            SamplingParams(max_new_tokens=200),
            settings,
        )
        measured[turns] = ToolArithmeticTask("t", task_rows, task_rows).eval_metrics(episodes)
    assert measured[0] == {
        "steps/convert/lookup_right": 0.0,
        "steps/convert/compute_right": 0.0,
        "steps/convert/answer_right": 0.0,
        "steps/convert/compute_right_given_lookup_wrong": 0.0,
    }
    assert measured[1]["steps/convert/lookup_right"] == 1.0 and measured[1]["steps/convert/compute_right"] == 0.0
    assert measured[1]["steps/convert/compute_right_given_lookup_right"] == 0.0
    assert measured[2]["steps/convert/compute_right"] == 1.0 and measured[2]["steps/convert/answer_right"] == 0.0
    assert measured[2]["steps/convert/compute_right_given_lookup_right"] == 1.0
    assert "steps/convert/compute_right_given_lookup_wrong" not in measured[2]
    # the model writing the number itself is not the calculator's result; a wrong unit's lookup is not right
    row = {"question": "How many feet are in 15 miles?", "ground_truth": "79200", "kind": "convert"}
    forged = Episode(
        group_id=0,
        index_in_group=0,
        row=row,
        steps=[
            Step(
                prompt_text="",
                prompt_ids=[],
                action_text="Answer: 79200",
                action_ids=[],
                truncated=False,
                anchor_state="start",
                tool_calls=[
                    {"id": "a", "name": "lookup", "arguments": {"unit": "yard"}},
                    {"id": "b", "name": "calculator", "arguments": {"expression": "1"}},
                ],
                tool_results=[
                    {"role": "tool", "tool_call_id": "a", "content": "1 yard = 36 inches", "error": None},
                    {"role": "tool", "tool_call_id": "b", "content": "Error: 79200", "error": "raised"},
                ],
            )
        ],
    )
    assert step_kind_metrics(row, forged) == {"lookup_right": False, "compute_right": False, "answer_right": False}
