"""Prompt datasets: every source kind, string and conversational prompts, bad rows, mixtures, chat format.

The hub cannot be reached from here: the hub path (``datasets.load_dataset(name, config, split)``)
is exercised on a local dir in the hub's layout (``data/<split>-*.parquet`` and a README with a
``configs:`` block), which load_dataset reads through the same code path as a downloaded repo.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from grouprl.config import ConfigError
from grouprl.data import chat_format
from grouprl.data.chat_format import apply_chat_template, render_prompt_ids, resolve_chat_template
from grouprl.data.mixture import MixtureError, load_mixture
from grouprl.data.prompt_rows import BadRowsError, PromptSpec, prompt_messages, to_prompt_rows
from grouprl.data.sources import DatasetSourceError, load_split

ROWS = [{"problem": f"What is {i} + {i}?", "solution": str(2 * i), "level": i % 3} for i in range(10)]


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    import datasets

    root = tmp_path_factory.mktemp("sources")
    ds = datasets.Dataset.from_list(ROWS)
    out = {"jsonl": write_jsonl(root / "rows.jsonl", ROWS)}
    (root / "rows.json").write_text(json.dumps(ROWS))
    out["json"] = root / "rows.json"
    ds.to_parquet(str(root / "rows.parquet"))
    out["parquet"] = root / "rows.parquet"
    ds.to_csv(str(root / "rows.csv"), index=False)
    out["csv"] = root / "rows.csv"
    split_dir = root / "split_dir"
    split_dir.mkdir()
    write_jsonl(split_dir / "train.jsonl", ROWS[:8])
    write_jsonl(split_dir / "test.jsonl", ROWS[8:])
    out["split_dir"] = split_dir
    hub = root / "org__math"  # the hub's layout: data/<split>-00000-of-00001.parquet + README configs
    (hub / "data").mkdir(parents=True)
    datasets.Dataset.from_list(ROWS[:7]).to_parquet(str(hub / "data" / "train-00000-of-00001.parquet"))
    datasets.Dataset.from_list(ROWS[7:]).to_parquet(str(hub / "data" / "test-00000-of-00001.parquet"))
    (hub / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
        "    path: data/train-*\n  - split: test\n    path: data/test-*\n---\n"
    )
    out["hub"] = hub
    datasets.DatasetDict({"train": ds, "validation": ds.select(range(2))}).save_to_disk(str(root / "saved"))
    out["saved"] = root / "saved"
    return out


@pytest.mark.parametrize("kind", ["jsonl", "json", "parquet", "csv"])
def test_each_file_type_loads_every_column(sources, kind):
    ds = load_split(str(sources[kind]), None, "train")
    assert ds.num_rows == 10
    assert set(ds.column_names) == {"problem", "solution", "level"}
    rows = list(ds)
    assert rows[3]["problem"] == "What is 3 + 3?" and str(rows[3]["solution"]) == "6"


def test_dirs_hub_layout_and_saved_datasets(sources):
    assert load_split(str(sources["split_dir"]), None, "test").num_rows == 2
    assert load_split(str(sources["hub"]), "default", "train").num_rows == 7
    assert load_split(str(sources["hub"]), None, "test")[0]["problem"] == "What is 7 + 7?"
    assert load_split(str(sources["saved"]), None, "validation").num_rows == 2


def test_missing_split_and_single_file_test_split_are_clear_errors(sources):
    with pytest.raises(DatasetSourceError, match="no split 'test'; it has \\['train', 'validation'\\]"):
        load_split(str(sources["saved"]), None, "test")
    with pytest.raises(DatasetSourceError, match="a single file is the 'train' split only"):
        load_split(str(sources["jsonl"]), None, "test")
    with pytest.raises(DatasetSourceError, match="hub dataset|dataset dir"):
        load_split(str(sources["hub"]), None, "validation")


def test_string_prompt_gets_the_system_prompt_and_columns_are_kept(sources):
    ds = load_split(str(sources["jsonl"]), None, "train")
    result = to_prompt_rows(ds, PromptSpec("problem", "solution", "Think first."), "rows.jsonl")
    row = result.rows[2]
    assert row["ground_truth"] == "4" and row["solution"] == "4" and row["level"] == 2  # every column kept
    assert prompt_messages(row["problem"], "Think first.") == [
        {"role": "system", "content": "Think first."},
        {"role": "user", "content": "What is 2 + 2?"},
    ]
    assert result.columns == ["problem", "solution", "level"]


def test_conversational_prompts_are_used_as_they_are():
    chat = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"}]
    assert prompt_messages(chat, "ignored: the list has a system message") == chat
    assert prompt_messages(chat[1:], "Added.")[0] == {"role": "system", "content": "Added."}
    with pytest.raises(ValueError, match="role 'robot'"):
        prompt_messages([{"role": "robot", "content": "x"}], None)


def test_bad_rows_are_counted_with_row_numbers_and_stop_past_the_threshold(caplog):
    rows = [{"prompt": "ok", "answer": "1"}, {"prompt": "", "answer": "1"}, {"prompt": "fine", "answer": None}] + [
        {"prompt": f"q{i}", "answer": str(i)} for i in range(17)
    ]
    with caplog.at_level(logging.WARNING):
        result = to_prompt_rows(rows, PromptSpec("prompt", "answer", max_bad_row_fraction=0.2), "mine.jsonl")
    assert len(result.rows) == 18 and [i for i, _ in result.bad] == [1, 2]
    assert "row 1: column 'prompt': prompt is an empty string" in caplog.text
    assert "row 2: column 'answer': solution is missing or empty" in caplog.text
    with pytest.raises(BadRowsError, match=r"mine.jsonl: 2 of 20 rows are bad \(10.0% > max_bad_row_fraction=0.05\)"):
        to_prompt_rows(rows, PromptSpec("prompt", "answer", max_bad_row_fraction=0.05), "mine.jsonl")


def test_missing_prompt_column_names_the_columns():
    with pytest.raises(ValueError, match=r"no prompt column 'question' .* columns \['prompt', 'answer'\]"):
        to_prompt_rows([{"prompt": "a", "answer": "b"}], PromptSpec("question"), "x")


def test_solution_check_marks_unusable_solutions():
    spec = PromptSpec(
        "p", "s", check_solution=lambda v: None if v.isdigit() else "not a number", max_bad_row_fraction=0.5
    )
    result = to_prompt_rows([{"p": "a", "s": "1"}, {"p": "b", "s": "one"}], spec, "x")
    assert result.bad == [(1, "column 's': not a number (value 'one')")]


# --- mixtures ------------------------------------------------------------------------------------


def test_mixture_weight_is_the_fraction_kept_and_test_split_is_seeded(sources, tmp_path):
    other = write_jsonl(
        tmp_path / "other.jsonl", [{"problem": f"p{i}", "solution": "s", "extra": 1} for i in range(40)]
    )
    spec = {
        "datasets": [
            {"id": str(sources["jsonl"]), "columns": ["problem", "solution"]},
            {"id": str(other), "columns": ["problem", "solution"], "weight": 0.25},
        ],
        "seed": 3,
        "test_split_size": 0.2,
    }
    train, test = load_mixture(spec)
    assert train.num_rows + test.num_rows == 10 + 10  # all of the first, a quarter of the 40
    assert set(train.column_names) == {"problem", "solution"}
    assert sum(p.startswith("p") for p in list(train["problem"]) + list(test["problem"])) == 10
    train2, test2 = load_mixture(spec)
    assert list(test["problem"]) == list(test2["problem"])  # seeded
    spec["seed"] = 4
    assert list(load_mixture(spec)[1]["problem"]) != list(test["problem"])
    whole, none = load_mixture({"datasets": [{"id": str(sources["jsonl"])}], "test_split_size": None})
    assert whole.num_rows == 10 and none is None


def test_mixture_column_mismatch_names_each_set(sources, tmp_path):
    other = write_jsonl(tmp_path / "other.jsonl", [{"question": "q", "solution": "s"}])
    with pytest.raises(
        MixtureError,
        match=r"columns differ \(.*rows.jsonl \(train\): \['level', 'problem', "
        r"'solution'\]; .*other.jsonl \(train\): \['question', 'solution'\]\)",
    ):
        load_mixture({"datasets": [{"id": str(sources["jsonl"])}, {"id": str(other)}]})
    with pytest.raises(MixtureError, match=r"has no columns \['problem'\]"):
        load_mixture({"datasets": [{"id": str(other), "columns": ["problem"]}]})


def test_mixture_with_a_top_level_test_split_size_is_an_error_not_a_silent_no_eval(sources):
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task

    mixture = {"datasets": [{"id": str(sources["jsonl"])}]}
    base = {
        "task": "prompt_dataset",
        "rewards": ["format"],
        "dataset_mixture": mixture,
        "dataset_prompt_column": "problem",
        "dataset_solution_column": "solution",
    }
    with pytest.raises(
        ConfigError,
        match=r"'test_split_size' \(0.2\) has no effect with 'dataset_mixture'.*"
        r"dataset_mixture.test_split_size",
    ):
        load_task(build_config(None, {**base, "test_split_size": 0.2}, environ={}))
    task = load_task(build_config(None, {**base, "dataset_mixture": {**mixture, "test_split_size": 0.2}}, environ={}))
    assert len(task.eval_rows) == 2 and len(task.train_rows) == 8


def test_mixture_schema_is_checked():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="weight"):
        load_mixture({"datasets": [{"id": "x", "weight": 2.0}]})
    with pytest.raises(ValidationError, match="Extra inputs"):
        load_mixture({"datasets": [{"id": "x", "wieght": 0.5}]})


# --- chat template, kwargs, truncation ------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from grouprl.models.tiny import init_tiny

    return init_tiny("abcdefghijklmnopqrstuvwxyz ?+[]0123456789", tmp_path_factory.mktemp("tok") / "m", 16, 1, 2)


@pytest.fixture()
def tokenizer(tokenizer_dir):
    from grouprl.models.loading import load_tokenizer

    return load_tokenizer(str(tokenizer_dir))  # fresh: a test may install its own template


def test_chat_template_from_a_file_and_kwargs_reach_it(tokenizer, tmp_path):
    template = (
        "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}{% if enable_thinking is defined and not enable_thinking %}"
        "[assistant] no think\n{% else %}[assistant]\n{% endif %}{% endif %}"
    )
    (tmp_path / "t.jinja").write_text(template)
    assert resolve_chat_template(str(tmp_path / "t.jinja")) == template
    with pytest.raises(FileNotFoundError, match="neither a Jinja template nor an existing file"):
        resolve_chat_template("no/such/template.jinja")
    apply_chat_template(tokenizer, str(tmp_path / "t.jinja"))
    text, _, cut = render_prompt_ids(tokenizer, [{"role": "user", "content": "hi"}], {"enable_thinking": False})
    assert text == "[user] hi\n[assistant] no think\n" and not cut
    assert render_prompt_ids(tokenizer, [{"role": "user", "content": "hi"}])[0].endswith("[assistant]\n")


def test_max_prompt_length_keeps_the_end_and_warns_once(tokenizer, caplog, monkeypatch):
    monkeypatch.setattr(chat_format, "_warned", False)
    with caplog.at_level(logging.WARNING):
        text, ids, cut = render_prompt_ids(
            tokenizer, [{"role": "user", "content": "abcdefghijklmnopqrstuvwxyz"}], max_prompt_length=24
        )
        again = render_prompt_ids(
            tokenizer, [{"role": "user", "content": "zyxwvutsrqponmlkjihgfedcba"}], max_prompt_length=24
        )
        short = render_prompt_ids(tokenizer, [{"role": "user", "content": "ab"}], max_prompt_length=24)
    assert len(ids) == 24 and cut and text.endswith("assistant\n")  # the end (the generation prompt) survives
    assert again[2] and not short[2] and len(short[1]) < 24
    assert caplog.text.count("left truncation") == 1  # warned once; the runner marks each cut step


def test_a_math_solution_math_verify_cannot_parse_is_a_bad_row(tmp_path):
    from grouprl.config import ConfigError
    from grouprl.run_config import build_config
    from grouprl.tasks import load_task

    rows = [{"problem": f"What is {i}+{i}?", "solution": f"The answer is $\\\\boxed{{{2 * i}}}$."} for i in range(19)]
    rows.append({"problem": "Name a fruit.", "solution": "banana"})
    data = write_jsonl(tmp_path / "math.jsonl", rows)
    cli = {
        "task": "prompt_dataset",
        "dataset_name_or_path": str(data),
        "dataset_prompt_column": "problem",
        "rewards": ["math_accuracy"],
    }
    task = load_task(build_config(None, cli, environ={}))
    assert len(task.train_rows) == 19 and task.train_rows[0]["ground_truth"].startswith("The answer")
    with pytest.raises(ConfigError, match=r"row 19: column 'solution': math-verify finds no answer in it"):
        load_task(build_config(None, {**cli, "max_bad_row_fraction": 0.01}, environ={}))
