"""Held-out evaluation: `grouprl eval` on both tasks and evaluate() on a model whose answers are known."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from grouprl import cli
from grouprl.run_config import build_config
from grouprl.models.loading import load_policy, load_tokenizer
from grouprl.rewards.builtin.number_answer import arithmetic_digits, parse_answer
from grouprl.rewards.builtin.gsm8k import extract_final
from grouprl.rewards.scorer import Scorer
from grouprl.rollout.generation import HFBackend, SamplingParams
from grouprl.tasks import load_task
from grouprl.job.evaluate import evaluate as run_evaluate

# the one episode-record schema (observe/step_logs.episode_record), with the row's index
FIELDS = {
    "index",
    "episode",
    "group",
    "prompt_id",
    "seed",
    "question",
    "prompt",
    "completion",
    "prediction",
    "ground_truth",
    "reward",
    "rewards",
    "correct",
    "reward_errors",
    "reward_reasons",
    "truncated",
    "episode_length",
    "new_tokens",
}
CPU = torch.device("cpu")


def evaluate(model, tokenizer, task, rows, params, device, out):
    """evaluate() with the HF backend and the task's scorer (the defaults a run builds)."""
    scorer = Scorer(
        task.reward_names,
        task.reward_weights,
        task.correct_reward,
        reward_kwargs=task.reward_kwargs,
        predict=task.predict,
    )
    return run_evaluate(HFBackend(model, tokenizer, device), tokenizer, task, rows, params, scorer, out)


def run_cli(argv, capsys) -> dict:
    capsys.readouterr()
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    return json.loads(out[out.index("{") :])


def read_rows(path) -> list[dict]:
    # split on "\n" only: GSM8K text holds U+2028, which str.splitlines() would also split on
    text = Path(path).read_text(encoding="utf-8")
    assert text.endswith("\n")
    return [json.loads(line) for line in text.split("\n")[:-1]]


def build_constant_answer_model(src: Path, out: Path, digit: str) -> Path:
    """A tiny model that greedily answers ``digit`` then <|im_end|> to any prompt.

    Every layer writes nothing to the residual stream (o_proj and down_proj are zero), so the
    next-token logits are E . norm(e_current) with tied embeddings E. With only three non-zero
    embeddings, a = e['\\n'], b = e[digit], c = e[eos]:  a = (1,0), b = (2,2), c = (0,5) ->
    after '\\n' the scores are a 1, b 2, c 0 -> digit; after the digit (b/|b| = (1,1)/sqrt2)
    a 0.71, b 2.83, c 3.54 -> eos. The generation prompt always ends in 'assistant\\n'.
    """
    from transformers import AutoModelForCausalLM

    shutil.copytree(src, out)  # tokenizer files as they are; only the weights change
    tok = load_tokenizer(str(out))
    model = AutoModelForCausalLM.from_pretrained(src)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb = model.model.embed_tokens.weight
        emb.zero_()
        nl, d, eos = tok.convert_tokens_to_ids("\n"), tok.convert_tokens_to_ids(digit), tok.eos_token_id
        assert len({nl, d, eos, tok.unk_token_id}) == 4
        emb[nl, 0] = 1.0
        emb[d, 0], emb[d, 1] = 2.0, 2.0
        emb[eos, 1] = 5.0
    assert model.lm_head.weight.data_ptr() == emb.data_ptr()  # tied
    model.save_pretrained(out)
    return out


def arithmetic_task(n: int):
    # Pinned options (not the defaults), so the hand-checked rows below stay what they are.
    return load_task(
        build_config(
            None,
            {
                "task": "arithmetic",
                "n_eval": n,
                "arithmetic_operands": 3,
                "arithmetic_operators": "+-",
                "n_train": 20000,
            },
            environ={},
        )
    )


def test_tiny_tokenizer_round_trips_prompts(tiny_arithmetic_dir):
    """The prompt the policy sees must be the rendered chat text, character for character.

    AutoTokenizer alone would not: transformers 5 loads the tiny model's character tokenizer as
    Qwen2Tokenizer (by the model type) and rebuilds a byte-level pipeline that drops every space and
    newline (``models/loading.py:auto_tokenizer`` reads the declared class instead).
    """
    from grouprl.tasks.base import SingleTurnEnv

    tok = load_tokenizer(str(tiny_arithmetic_dir))
    task = arithmetic_task(4)
    messages = SingleTurnEnv(task.messages(task.eval_rows[0])).reset().messages
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert ids[-1] == tok.convert_tokens_to_ids("\n")
    plain = "12+3\n-15\n"  # every character is in the arithmetic vocabulary
    assert tok.decode(tok(plain, add_special_tokens=False)["input_ids"]) == plain
    assert len(tok(plain, add_special_tokens=False)["input_ids"]) == len(plain)  # one token per character


# --- arithmetic through the CLI -------------------------------------------------------------------


def test_cli_eval_arithmetic(tiny_arithmetic_dir, tmp_path, capsys):
    out = tmp_path / "per_example.jsonl"
    result = run_cli(
        [
            "eval",
            "--model",
            str(tiny_arithmetic_dir),
            "--task",
            "arithmetic",
            "--n",
            "20",
            "--max_new_tokens",
            "8",
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert set(result) >= {"accuracy", "reward", "completions/mean_length", "pass@1", "n", "per_example"}
    assert 0.0 <= result["accuracy"] <= 1.0
    assert 0.0 < result["completions/mean_length"] <= 8
    assert result["n"] == 20
    assert result["per_example"] == str(out)

    rows = read_rows(out)
    assert len(rows) == 20
    expected_truth = [r["ground_truth"] for r in load_task(build_config(None, {"n_eval": 20}, environ={})).eval_rows]
    for i, row in enumerate(rows):
        assert set(row) == FIELDS
        assert row["index"] == i
        assert row["ground_truth"] == expected_truth[i]
        assert 1 <= row["new_tokens"] <= 8
        assert row["prediction"] == parse_answer(row["completion"])
        assert row["reward"] == pytest.approx(arithmetic_digits(row["completion"], row["ground_truth"]))
        assert row["correct"] == (row["prediction"] == row["ground_truth"])
    assert result["accuracy"] == pytest.approx(sum(r["correct"] for r in rows) / 20)
    assert result["reward"] == pytest.approx(sum(r["reward"] for r in rows) / 20)
    assert result["completions/mean_length"] == pytest.approx(sum(r["new_tokens"] for r in rows) / 20)

    # a second run replaces the per-example file instead of appending to it
    run_cli(
        [
            "eval",
            "--model",
            str(tiny_arithmetic_dir),
            "--task",
            "arithmetic",
            "--n",
            "5",
            "--max_new_tokens",
            "8",
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert len(read_rows(out)) == 5


def test_eval_with_known_answers(tiny_arithmetic_dir, tmp_path):
    # eval rows 0..19 of the arithmetic task (hand-checked): row 8 is '8 = ...' with answer 8,
    # row 10 answers '128', row 0 answers '-82'.
    task = arithmetic_task(20)
    rows = task.eval_rows[:20]
    truths = [r["ground_truth"] for r in rows]
    assert truths[8] == "8" and truths[10] == "128" and truths[0] == "-82"
    model_dir = build_constant_answer_model(tiny_arithmetic_dir, tmp_path / "says8", "8")
    policy = load_policy(build_config(None, {}, environ={}).model, str(model_dir), CPU, need_reference=False)
    params = SamplingParams(max_new_tokens=6, greedy=True, batch_size=7)  # several generate calls
    out = tmp_path / "known.jsonl"
    result = evaluate(policy.model, policy.tokenizer, task, rows, params, CPU, out)
    per = read_rows(out)
    assert [r["completion"] for r in per] == ["8"] * 20
    assert [r["new_tokens"] for r in per] == [2] * 20  # '8' and <|im_end|>
    assert [r["prediction"] for r in per] == ["8"] * 20
    assert [r["correct"] for r in per] == [t == "8" for t in truths]
    assert result["accuracy"] == pytest.approx(truths.count("8") / 20) and result["accuracy"] > 0
    assert result["completions/mean_length"] == 2.0
    assert per[8]["reward"] == 1.0
    assert per[10]["reward"] == pytest.approx(0.5 * 1 / 3)  # units digit matches '128'
    assert per[0]["reward"] == 0.0
    assert result["reward"] == pytest.approx(sum(arithmetic_digits("8", t) for t in truths) / 20)


def test_greedy_eval_is_deterministic(tiny_arithmetic_dir, tmp_path):
    task = arithmetic_task(12)
    policy = load_policy(build_config(None, {}, environ={}).model, str(tiny_arithmetic_dir), CPU, need_reference=False)
    params = SamplingParams(max_new_tokens=6, greedy=True, batch_size=5)
    runs = []
    for k in range(2):
        torch.manual_seed(k)  # different RNG state: greedy must not care
        out = tmp_path / f"run{k}.jsonl"
        result = evaluate(policy.model, policy.tokenizer, task, task.eval_rows, params, CPU, out)
        runs.append((result, read_rows(out)))
    assert runs[0][0] == runs[1][0]
    assert [r["completion"] for r in runs[0][1]] == [r["completion"] for r in runs[1][1]]
    assert runs[0][1] == runs[1][1]
    # batch size does not change greedy outputs either
    params_one = SamplingParams(max_new_tokens=6, greedy=True, batch_size=12)
    result = evaluate(policy.model, policy.tokenizer, task, task.eval_rows, params_one, CPU, tmp_path / "b.jsonl")
    assert [r["completion"] for r in read_rows(tmp_path / "b.jsonl")] == [r["completion"] for r in runs[0][1]]
    assert result["accuracy"] == runs[0][0]["accuracy"]


# --- gsm8k through the CLI ------------------------------------------------------------------------


def test_cli_init_model_and_eval_gsm8k(gsm8k_dir, tmp_path, capsys):
    model_dir = tmp_path / "tiny_gsm8k"
    assert (
        cli.main(
            [
                "init-model",
                "--task",
                "gsm8k",
                "--dataset_name_or_path",
                str(gsm8k_dir),
                "--out",
                str(model_dir),
                "--hidden_size",
                "32",
                "--num_layers",
                "1",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip() == str(model_dir)
    assert (model_dir / "config.json").is_file()
    config = json.loads((model_dir / "config.json").read_text())
    assert config["hidden_size"] == 32 and config["num_hidden_layers"] == 1

    result = run_cli(
        [
            "eval",
            "--task",
            "gsm8k",
            "--dataset_name_or_path",
            str(gsm8k_dir),
            "--model",
            str(model_dir),
            "--n",
            "4",
            "--max_new_tokens",
            "8",
            "--device",
            "cpu",
        ],
        capsys,
    )
    assert 0.0 <= result["accuracy"] <= 1.0
    assert 0.0 < result["completions/mean_length"] <= 8
    assert result["n"] == 4
    default_out = model_dir / "eval_gsm8k.jsonl"
    assert result["per_example"] == str(default_out)
    rows = read_rows(default_out)
    assert len(rows) == 4
    assert rows[0]["question"].startswith("Janet")  # test.jsonl row 0
    assert [r["ground_truth"] for r in rows][0] == "18"
    for row in rows:
        assert set(row) == FIELDS
        assert 1 <= row["new_tokens"] <= 8
        assert row["prediction"] == extract_final(row["completion"])
        # 8 tokens of an untrained character model cannot hold a correct 'Final: <n>' line
        assert row["correct"] is False and row["reward"] in (0.0, 0.1)
