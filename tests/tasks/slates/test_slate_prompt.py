"""The slate task's rows: the prompt builder on hand-written rows, gold resolution, filtering, the
reward's parse table and the synthetic generator."""

from __future__ import annotations

import json

import pytest

from grouprl.rewards.builtin.slate_accuracy import parse_slate_answer, slate_accuracy, slate_click, slate_opinion
from grouprl.tasks.slates import schema
from grouprl.tasks.slates.prompt import NO_HISTORY, NO_PROFILE, build_prompt
from grouprl.tasks.slates.rows import prepare_rows, to_task_row
from grouprl.tasks.slates.synthetic import ceiling, generate_issue, write_dataset

SLATE = [
    {
        "id": "aaa",
        "title": "Gun bans do not work",
        "channel_title": "Liberty Talk",
        "duration": 300,
        "view_count": 12000,
        "like_count": 300,
        "comment_count": 40,
    },
    {"id": "bbb", "title": "Background checks save lives", "channel_title": "Safe Streets", "duration": "PT2M5S"},
    {"id": "ccc", "title": "", "channel_title": None},
]


def gun_row(**over):
    row = {
        "issue": "gun_control",
        "participant_study": "study1",
        "slate_items_json": json.dumps(SLATE),
        "n_options": 3,
        "next_video_id": "bbb",
        "next_video_title": "Background checks save lives",
        "current_video_id": "v3",
        "current_video_title": "Town hall on guns",
        "current_video_channel": "Civic Desk",
        "watched_vids_json": ["v1", "v2", "v3", "bbb"],
        "watched_detailed_json": [
            {"id": "v1", "title": "First video", "channel_title": "Chan One", "watch_seconds": 30, "total_length": 120},
            {
                "id": "v2",
                "title": "Second video",
                "channel_title": "Chan Two",
                "watch_ms": 45000,
                "total_length_ms": 90000,
            },
            {"id": "v3", "title": "Town hall on guns", "channel_title": "Civic Desk"},
            {"id": "bbb", "title": "Background checks save lives"},
        ],
        "age": 34,
        "q26": "Woman",
        "q29": "White",
        "pid1": "Democrat",
        "ideo1": 2,
        "q31": "$50,000-$74,999",
        "college": 1,
        "freq_youtube": "daily",
        "pol_interest": "very interested",
        "stricter_laws": 1,
        "gun_index": 0.7,
        "gun_index_2": 0.8,
    }
    row.update(over)
    return row


def blocks(prompt: str) -> list[str]:
    return prompt.split("\n\n")


def test_every_block_in_order():
    row = gun_row()
    prompt = build_prompt(row, schema.issue_of(row), schema.slate_items(row))
    b = blocks(prompt)
    assert b[0] == (
        "VIEWER 34 years old; White woman; Democrat, liberal; income $50,000-$74,999; college-educated; "
        "watches YouTube daily.\nInitial Viewpoint: Supports stricter gun laws"
    )
    assert b[1] == "CURRENTLY WATCHING Town hall on guns (from Civic Desk)"
    assert b[2] == (
        "RECENTLY WATCHED (NEWEST LAST)\n"
        "1. First video (watched 30s of 120s (25% complete), from Chan One)\n"
        "2. Second video (watched 45s of 90s (50% complete), from Chan Two)"
    )
    assert b[3].startswith(
        "SURVEY HIGHLIGHTS\nparty Democrat; ideology liberal; political interest very interested; "
        "YouTube use daily; wants stricter gun laws: yes; gun-control index: 0.7"
    )
    # wave-2 answers are the label: never shown
    assert "0.8" not in prompt
    assert b[4] == (
        "OPTIONS\n1. Gun bans do not work (Liberty Talk, 300s long) — Engagement: views 12,000, likes 300, "
        "comments 40\n2. Background checks save lives (Safe Streets, 125s long)\n3. (untitled) [id ccc]"
    )
    assert b[5] == (
        "QUESTIONS\n1. Which option number will the viewer watch next?\n2. After this recommendation, "
        "will the viewer's opinion on gun control increase, decrease, or stay the same?"
    )
    assert len(b) == 6


def test_history_limit_and_all():
    row = gun_row()
    items = schema.slate_items(row)
    one = blocks(build_prompt(row, schema.issue_of(row), items, max_history=1))[2]
    assert one == "RECENTLY WATCHED (NEWEST LAST)\n1. Second video (watched 45s of 90s (50% complete), from Chan Two)"
    for everything in (0, -1, 12):
        assert blocks(build_prompt(row, schema.issue_of(row), items, max_history=everything))[2].count("\n") == 2


def test_ids_on_and_off():
    row = gun_row()
    items = schema.slate_items(row)
    off = build_prompt(row, schema.issue_of(row), items)
    on = build_prompt(row, schema.issue_of(row), items, show_ids=True)
    assert "[id aaa]" not in off and "[id ccc]" in off  # a missing title always shows the id
    assert "1. Gun bans do not work [id aaa] (Liberty Talk" in on
    assert "CURRENTLY WATCHING Town hall on guns [id v3]" in on
    assert "1. First video [id v1] (watched" in on


def test_missing_fields_leave_fragments_out():
    bare = {
        "issue": "minimum_wage",
        "slate_items_json": [{"id": "x", "title": "Only option"}],
        "next_video_id": "x",
        "current_video_id": "c",
        "current_video_title": "Now",
        "age": float("nan"),
        "q26": "",
        "pid1": None,
    }
    prompt = build_prompt(bare, schema.issue_of(bare), schema.slate_items(bare))
    b = blocks(prompt)
    assert b[0] == NO_PROFILE
    assert b[1] == "CURRENTLY WATCHING Now"
    assert b[2] == f"RECENTLY WATCHED (NEWEST LAST)\n{NO_HISTORY}"
    assert b[3] == "OPTIONS\n1. Only option"  # no survey block when empty
    assert "the minimum wage" in b[4]
    assert "None" not in prompt and "nan" not in prompt


@pytest.mark.parametrize(
    "fields, line",
    [
        ({"minwage15_w1": 0}, "Initial Viewpoint: Opposes a $15 minimum wage"),
        ({"minwage15_w1": "yes"}, "Initial Viewpoint: Supports a $15 minimum wage"),
        ({"mw_index_w1": 0.2}, "Initial Viewpoint: Opposes raising the minimum wage"),
        ({"mw_index_w1": 0.5}, None),
        ({}, None),
    ],
)
def test_stance_lines(fields, line):
    row = {"issue": "minimum_wage", "age": 50, **fields}
    first = build_prompt(row, schema.issue_of(row), SLATE).split("\n\n")[0].split("\n")
    assert (first[1] if len(first) > 1 else None) == line


def test_nested_survey_row_is_read():
    row = gun_row()
    survey = {k: row.pop(k) for k in ("age", "q26", "q29", "pid1", "stricter_laws", "gun_index", "gun_index_2")}
    row["selected_survey_row"] = json.dumps(survey)
    task_row = to_task_row(row, "hand row")
    assert task_row["question"].startswith("VIEWER 34 years old; White woman; Democrat")
    assert task_row["opinion_label"] == "increase"


def test_gold_resolution():
    row = gun_row()
    items = schema.slate_items(row)
    assert schema.gold_id(row) == "bbb"
    assert schema.gold_index(items, "bbb") == 2
    # no solution column: the video after the last occurrence of the current one
    no_col = gun_row(next_video_id=None, watched_vids_json=["v3", "aaa", "v3", "bbb"])
    assert schema.gold_id(no_col) == "bbb"
    assert schema.gold_id(gun_row(next_video_id=None), solution_key="other") == "bbb"
    # unknown id: fall back to the canonical title
    assert schema.gold_index(items, "zzz", "  GUN bans -- do not work!! ") == 1
    assert schema.gold_index(items, "zzz", "something else") is None
    assert schema.canonical_title("Hello, World 2!") == "helloworld2"


def test_opinion_labels():
    issue = schema.GUN
    assert schema.opinion_label({"gun_index": 0.5, "gun_index_2": 0.6}, issue) == "increase"
    assert schema.opinion_label({"gun_index": 0.5, "gun_index_2": 0.2}, issue) == "decrease"
    assert schema.opinion_label({"gun_index": 0.5, "gun_index_2": 0.5 + 5e-7}, issue) == "no_change"
    assert schema.opinion_label({"gun_index": 0.5}, issue) is None
    assert schema.opinion_label({"mw_index_w1": "0.3", "mw_index_w2": "0.1"}, schema.WAGE) == "decrease"


def test_filtering_counts_every_drop(caplog):
    raws = [
        gun_row(),
        gun_row(slate_items_json="[]"),
        gun_row(next_video_id="zzz", next_video_title="nope"),
        gun_row(next_video_id=None, next_video_title=None, watched_vids_json=["v3"]),
    ]
    rows, counts = prepare_rows(raws, "hand.jsonl")
    assert len(rows) == 1 and rows[0]["gold_index"] == 2 and rows[0]["n_options"] == 3
    assert (counts.kept, counts.empty_slate, counts.gold_not_in_slate, counts.no_gold) == (1, 1, 1, 1)
    assert "hand.jsonl row 1" in caplog.text and "dropped 3" in caplog.text
    with pytest.raises(ValueError, match="every row was dropped"):
        prepare_rows(raws[1:], "bad.jsonl")
    with pytest.raises(ValueError, match="row 0 field 'slate_items_json': not valid JSON"):
        prepare_rows([gun_row(slate_items_json="[{")], "broken.jsonl")


@pytest.mark.parametrize(
    "completion, choice, formatted",
    [
        ("<answer>2</answer>", 2, True),
        ("<think>hmm</think><answer> option 3 </answer>", 3, True),
        ("<ANSWER>Option 1</ANSWER>", 1, True),
        ("<answer>3.</answer>", None, True),
        ('<answer>"3"</answer>', None, True),
        ("<answer>Background checks save lives</answer>", None, True),
        ("<answer></answer>", None, True),
        ("2", None, False),
        ("the answer is 2", None, False),
    ],
)
def test_parse_table(completion, choice, formatted):
    answer = parse_slate_answer(completion, allow_bare_number=False)
    assert (answer.choice, answer.formatted) == (choice, formatted)


def test_bare_numbers_only_when_allowed(monkeypatch):
    assert parse_slate_answer("2").choice is None
    monkeypatch.setenv("PUREACC_ALLOW_BARE_NUMBER", "1")
    assert parse_slate_answer(" option 2 ").choice == 2
    assert parse_slate_answer("I pick 2").choice is None


@pytest.mark.parametrize(
    "word, label",
    [
        ("increase", "increase"),
        ("Higher", "increase"),
        ("up", "increase"),
        ("lower", "decrease"),
        ("drop", "decrease"),
        ("no_change", "no_change"),
        ("stay the same", "no_change"),
        ("unchanged", "no_change"),
        ("sideways", None),
    ],
)
def test_opinion_synonyms(word, label):
    assert parse_slate_answer(f"<answer>1</answer><opinion>{word}</opinion>").opinion == label


def test_reward_values():
    good = "<think>x</think><answer>2</answer><opinion>up</opinion>"
    assert slate_accuracy(good, "2", n_options=3, opinion_label="increase") == 1.0
    assert slate_accuracy(good, "2", n_options=3, opinion_label="decrease") == 0.5
    assert slate_accuracy(good, "1", n_options=3, opinion_label="increase") == 0.5
    assert slate_accuracy(good, "2", n_options=3, opinion_label=None) == 1.0  # only labelled parts count
    assert slate_accuracy("<answer>9</answer>", "9", n_options=3) == 0.0  # out of range is wrong
    assert slate_accuracy("2", "2", n_options=3) == 0.0
    assert slate_accuracy("2", "2", n_options=3, allow_bare_number=True) == 1.0
    assert slate_click(good, "2", n_options=3) == 1.0 and slate_opinion(good, opinion_label=None) is None
    with pytest.raises(ValueError, match="opinion label 'sideways'"):
        slate_accuracy(good, "2", opinion_label="sideways")


def test_generator_is_seeded_and_in_schema(tmp_path):
    a = generate_issue("minimum_wage", 30, 10, seed=3)
    assert a == generate_issue("minimum_wage", 30, 10, seed=3)
    assert a != generate_issue("minimum_wage", 30, 10, seed=4)
    rows, counts = prepare_rows(a["train"], "synthetic")
    assert counts.dropped == 0 and {r["issue"] for r in rows} == {"minimum_wage"}
    assert all(r["opinion_label"] in schema.OPINIONS for r in rows)
    wage_columns = [
        "minwage15_w1",
        "minwage15_w2",
        "mw_support_w1",
        "mw_support_w2",
        "minwage_text_w1",
        "minwage_text_w2",
        "mw_index_w1",
        "mw_index_w2",
    ]
    assert all(schema.field_value(raw, c) is not None for raw in a["train"] for c in wage_columns)
    report = write_dataset(tmp_path, ["gun_control"], 20, 300, seed=0)
    assert (tmp_path / "gun" / "train.jsonl").is_file() and (tmp_path / "ceiling.json").is_file()
    gun = report["gun_control"]
    # the rule reader is near the analytic ceiling and far above chance
    assert abs(gun["click_reader"] - gun["click_ceiling_analytic"]) < 0.06
    assert gun["click_reader"] > gun["click_chance"] + 0.4 and gun["opinion_reader"] > 0.75


def test_ceiling_drops_with_noise():
    noisy = generate_issue("gun_control", 0, 300, seed=1, noise=0.6)["validation"]
    assert ceiling(noisy, 0.6)["click_reader"] < 0.65
