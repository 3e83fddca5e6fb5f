"""Every built-in reward on answers of any length and any Unicode: a wrong or garbage answer is
scored (as wrong), never raised. Digit runs are a classic collapse mode: two such completions in
a batch must not stop a run. Called exactly as the scorer calls them (score_batch / plain call)."""

from __future__ import annotations

import math
import threading
import time

import pytest

from grouprl.records import EvaluateResult
from grouprl.rewards.builtin.gsm8k import gsm8k_final, normalize_number
from grouprl.rewards.builtin.slate_accuracy import slate_accuracy, slate_click
from grouprl.rewards.kit import conversation, score_batch
from grouprl.rewards.registry import REWARDS, is_typed

DIGITS = "1234567890"
HOSTILE = [
    "Final: " + "9" * 29,  # one past Decimal's default 28-digit context
    "Final: " + "1" * 5000,  # past int()'s 4300-digit limit
    "Final: -" + "0" * 3000 + "." + "0" * 3000,
    "Final: 1," + ",".join(["000"] * 2000),
    "7" * 200_000,  # a bare digit run
    "<answer>" + "3" * 6000 + "</answer><opinion>up</opinion>",
    "<answer>option " + "0" * 50 + "2</answer>",
    "Final: ١٢٣",
    "Final: １２",
    "Final: ²",
    "<answer>٣</answer>",
    "<answer>²</answer>",
    "३४",
    "\\boxed{" + "9" * 5000 + "}",
    "The answer is " + "8" * 5000,
    "\\boxed{1e99999999}",
    "\\boxed{9^{9^{9}}}",
    "\\boxed{10^{10^{10}}}",
    "\\boxed{\\frac{1}{0}}",
    "\\boxed{" * 3000,
    "[" * 100_000,
    '{"a": ' * 50_000,
    '{"x": ' + "1" * 5000 + "}",
    "```json\n" + "[" * 5000 + "\n```",
    "<think>" * 10_000,
    "\x00\ud800\udfff\U0010ffff" * 100,
    "\u2028Final: 5\u2029",
    "\r\n" * 1000 + "Final: 3",
    "NaN",
    "inf",
    "Final: 1e400",
    "-" * 10_000,
    "",
]
GOLD = {
    "gsm8k_final": "18",
    "arithmetic_exact": "42",
    "arithmetic_digits": "42",
    "slate_accuracy": "4",
    "slate_click": "4",
    "slate_opinion": "4",
    "json_schema": None,
    "tool_call_match": '[{"name": "f"}]',
    "code_execution": None,
}
KWARGS = {
    "slate_accuracy": {"n_options": 5, "opinion_label": "increase"},
    "slate_opinion": {"opinion_label": "increase"},
    "json_schema": {"schema": {"type": "object", "properties": {"x": {"type": "integer"}}}},
    "math_accuracy": {"timeout_seconds": 1},
    "cosine_length": {"timeout_seconds": 1},
    "soft_overlong": {"max_completion_len": 100, "cache_len": 10},
}
SKIP = {"code_execution"}  # its hostile programs are the sandbox's tests


def _scores(name: str, fn, texts: list[str]) -> list[float | None]:
    gold = GOLD.get(name, "18")
    kwargs = KWARGS.get(name, {})
    if is_typed(fn):
        messages = [conversation("q", t) for t in texts]
        columns = {k: [v] * len(texts) for k, v in kwargs.items()}
        if fn.reward_mode == "batch":
            columns["group_ids"] = [0] * len(texts)
        results = score_batch(fn, messages, [gold] * len(texts), **columns)
        assert all(isinstance(r, EvaluateResult) for r in results)
        return [r.score if r.is_score_valid else None for r in results]
    return [fn(t, gold, **kwargs) for t in texts]


@pytest.mark.parametrize("name", sorted(set(REWARDS) - SKIP))
def test_every_builtin_scores_hostile_answers_without_raising(name):
    scores = _scores(name, REWARDS[name], HOSTILE)
    assert len(scores) == len(HOSTILE)
    for text, score in zip(HOSTILE, scores):
        assert score is None or (isinstance(score, float) and math.isfinite(score)), (name, text[:40], score)
        if name in ("gsm8k_final", "arithmetic_exact", "slate_click", "math_accuracy"):
            assert score in (None, 0.0, 0.1), (name, text[:40], score)  # never correct: gold is 18/42/4


def test_long_numbers_compare_exactly():
    big = "12345678901234567890123456789012345"  # 35 digits
    assert gsm8k_final(f"Final: {big}", big) == 1.0
    assert gsm8k_final(f"Final: {big}", big[:-1] + "6") == 0.1  # one digit off: wrong, not equal by rounding
    assert gsm8k_final(f"Final: {big}.000", big) == 1.0
    assert normalize_number("1" * 5000) == "1" * 5000
    assert gsm8k_final("Final: １８", "18") == 0.0  # not ASCII digits: no number, format missing
    assert slate_click("<answer>" + "2" * 5000 + "</answer>", "2") == 0.0
    assert slate_accuracy("<answer>02</answer><opinion>up</opinion>", "2", n_options=5, opinion_label="increase") == 1.0


def test_math_accuracy_finishes_within_its_budget_off_the_main_thread():
    # Training calls rewards in a worker thread, where math-verify's own signal.alarm limits are off.
    fn = REWARDS["math_accuracy"]
    out: list = []
    start = time.monotonic()
    worker = threading.Thread(
        target=lambda: out.append(
            _scores(
                "math_accuracy",
                fn,
                [
                    "\\boxed{9^{9^{9}}}",
                    "\\boxed{10^{10^{10}}}",
                    "\\boxed{2^{2^{2^{2^{2^{2}}}}}}",
                    "\\boxed{99999999!}",
                    "\\boxed{18}",
                ],
            )
        ),
        daemon=True,
    )
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "math_accuracy hung past its budget"
    assert out[0][:4] == [0.0] * 4 and out[0][4] == 1.0
    assert time.monotonic() - start < 5 * (3 * 1 + 1) + 10


def test_fenced_blocks_are_found_in_linear_time_as_the_regex_found_them():
    import random

    from grouprl.rewards.builtin import completion_blocks

    def by_regex(text):  # the reference: the regex the scan replaced (quadratic on a run of backticks)
        return [(m.group(1).lower(), m.group(2)) for m in completion_blocks._FENCE.finditer(text)]

    rng = random.Random(0)
    alphabet = ["`", "```", "\n", "py", "python", " ", "x", "\t", "json", "+", "é"]
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert completion_blocks._fenced_blocks(text) == by_regex(text), repr(text)
    start = time.monotonic()
    assert completion_blocks._fenced_blocks("`" * 1_000_000) == []  # the regex took 38 s on 100k of them
    assert REWARDS["code_execution"](conversation("q", "`" * 1_000_000), test_cases=["assert f() == 1"]).score == 0.0
    assert time.monotonic() - start < 2.0
