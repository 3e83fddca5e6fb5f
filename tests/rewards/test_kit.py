"""The typed reward interface: @reward_function, its checks, and its use inside a real TRL run."""

from __future__ import annotations

import asyncio

import pytest

from grouprl.records import EvaluateResult, Message, MetricResult
from grouprl.rewards.kit import RewardFunctionError, reward_function, score_batch


@reward_function
def last_is_42(messages: list[Message], ground_truth=None, **kwargs) -> EvaluateResult:
    said = messages[-1].content.strip()
    ok = said == str(ground_truth)
    return EvaluateResult(
        score=float(ok),
        reason=f"said {said!r}",
        metrics={"exact": MetricResult(score=float(ok), reason="string match")},
    )


def test_bare_pointwise_coerces_dicts_and_returns_result():
    result = last_is_42(
        [{"role": "user", "content": "6*7?"}, {"role": "assistant", "content": " 42 "}], ground_truth=42
    )
    assert result.score == 1.0 and result.metrics["exact"].score == 1.0 and "42" in result.reason
    assert last_is_42([Message(role="assistant", content="41")], ground_truth=42).score == 0.0
    assert last_is_42.reward_mode == "pointwise" and last_is_42.reward_id == "last_is_42"


def test_batch_and_async_with_arguments():
    @reward_function(mode="batch", id="lengths", requirements=["numpy"])
    async def lengths(rollouts_messages, ground_truths=None, **kwargs):
        await asyncio.sleep(0)
        return [EvaluateResult(score=len(m[-1].content) / 10) for m in rollouts_messages]

    out = lengths([[{"role": "assistant", "content": "abc"}], [{"role": "assistant", "content": "abcde"}]])
    assert [r.score for r in out] == [0.3, 0.5]
    assert lengths.reward_id == "lengths" and lengths.requirements == ["numpy"]
    # the same function through the mode-agnostic helper
    assert [r.score for r in score_batch(lengths, [[{"role": "assistant", "content": "x"}]])] == [0.1]


def test_function_without_kwargs_fails_at_decoration():
    with pytest.raises(RewardFunctionError, match=r"'strict'.*\*\*kwargs"):

        @reward_function
        def strict(messages, ground_truth=None):
            return EvaluateResult(score=0.0)


def test_wrong_return_type_fails_at_first_call_naming_the_function():
    @reward_function
    def returns_float(messages, ground_truth=None, **kwargs):
        return 1.0

    with pytest.raises(RewardFunctionError, match="'returns_float' returned float; expected EvaluateResult"):
        returns_float([{"role": "assistant", "content": "x"}])


def test_bad_messages_and_bad_mode_are_named():
    with pytest.raises(RewardFunctionError, match="message 0 must be a dict or Message"):
        last_is_42(["not a message"])
    with pytest.raises(RewardFunctionError, match="mode must be one of"):
        reward_function(mode="pairwise")(lambda messages, **kw: None)


def test_batch_returning_wrong_length_is_an_error():
    @reward_function(mode="batch")
    def short(rollouts_messages, ground_truths=None, **kwargs):
        return [EvaluateResult(score=1.0)]

    with pytest.raises(RewardFunctionError, match="must return a list of 2"):
        short([[{"role": "assistant", "content": "a"}], [{"role": "assistant", "content": "b"}]])


def test_trl_adapter_inside_a_real_trl_run(tiny_arithmetic_dir, tmp_path, monkeypatch):
    """The same typed reward drives two real TRL GRPOTrainer steps through ``.as_trl()``."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from grouprl.models.loading import load_tokenizer

    calls: list[tuple[str, str]] = []

    @reward_function
    def digits_match(messages, ground_truth=None, **kwargs):
        said = messages[-1].content
        calls.append((said, ground_truth))
        if not said.strip().isdigit():
            return EvaluateResult(score=0.0, is_score_valid=False, reason="no number: no opinion")
        return EvaluateResult(score=float(said.strip() == ground_truth))

    rows = [
        {"prompt": [{"role": "user", "content": f"{a}+{b}"}], "ground_truth": str(a + b)}
        for a, b in [(12, 30), (45, 11), (20, 20), (33, 3)]
    ]
    args = GRPOConfig(
        output_dir=str(tmp_path),
        num_generations=4,
        per_device_train_batch_size=8,
        max_completion_length=4,
        max_steps=2,
        learning_rate=1e-3,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        use_vllm=False,
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(str(tiny_arithmetic_dir), dtype=torch.float32),
        reward_funcs=digits_match.as_trl(),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=load_tokenizer(str(tiny_arithmetic_dir)),
    )
    trainer.train()
    assert len(calls) == 2 * 8  # every completion of both steps went through the typed function
    assert {truth for _, truth in calls} <= {r["ground_truth"] for r in rows}
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2 and any(k.startswith("rewards/digits_match") for k in logged[0])
