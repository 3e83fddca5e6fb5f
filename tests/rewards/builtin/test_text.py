"""Built-in text rewards: hand-computed values on realistic completions, and the TRL adapter."""

from __future__ import annotations

import math
import re

import pytest

from grouprl.rewards.builtin.text import (
    BUILTIN_TEXT,
    cosine_length,
    format_reward,
    length_reward,
    math_accuracy,
    reasoning_steps,
    repetition_penalty,
    soft_overlong,
    tag_count,
    with_options,
)
from grouprl.rewards.kit import score_batch

PROMPT = {"role": "user", "content": "A pie is cut in half and one half is eaten. What fraction is left?"}

R1_CORRECT = (  # think/answer format, LaTeX fraction in \boxed{}
    "<think>\nStep 1: the whole pie is 1.\nStep 2: one half is eaten, so 1 - 1/2 = 1/2 is left.\n</think>\n"
    "<answer>\n$\\boxed{\\frac{1}{2}}$\n</answer>"
)
R1_WRONG = "<think>\nThe pie has three pieces, one is left.\n</think>\n<answer>\n$\\boxed{\\frac{1}{3}}$\n</answer>"
LATEX_SQRT = "We solve $x^2 = 2$ with $x > 0$, so $x = \\sqrt{2}$. The final answer is $\\boxed{\\sqrt{2}}$."
PLAIN = "She sold 48 in April and 24 in May, 48 + 24 = 72. The final answer is 72"


def conv(completion: str) -> list[dict[str, str]]:
    return [PROMPT, {"role": "assistant", "content": completion}]


# --- math_accuracy -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion, gold, expected",
    [
        (R1_CORRECT, "0.5", 1.0),  # \frac{1}{2} == 0.5
        (R1_CORRECT, "$\\frac{1}{2}$", 1.0),  # LaTeX gold
        (R1_WRONG, "0.5", 0.0),  # 1/3 != 1/2
        (LATEX_SQRT, "\\sqrt{2}", 1.0),  # bare LaTeX gold, retried inside $..$
        (LATEX_SQRT, "1.5", 0.0),
        (PLAIN, "Natalia sold 48/2 = 24 clips in May.\n#### 72", 1.0),  # GSM8K gold: the part after ####
        (PLAIN, 72, 1.0),  # numeric gold
    ],
)
def test_math_accuracy_values(completion, gold, expected):
    result = math_accuracy(conv(completion), ground_truth=gold)
    assert result.is_score_valid and result.score == expected
    assert result.metrics["correct"].score == expected and result.metrics["answer_found"].score == 1.0
    assert result.reason


def test_math_accuracy_no_answer_is_zero_and_unparsable_gold_is_no_opinion():
    nothing = math_accuracy(conv("I am not sure how to solve this."), ground_truth="3")
    assert nothing.is_score_valid and nothing.score == 0.0 and nothing.metrics["answer_found"].score == 0.0
    for gold in ("banana", "N/A", "", None):
        result = math_accuracy(conv(R1_CORRECT), ground_truth=gold)
        assert result.is_score_valid is False and result.score == 0.0 and "no opinion" in result.reason
    # through the TRL adapter the invalid score becomes None
    trl = math_accuracy.as_trl()
    assert trl([[PROMPT]] * 2, [R1_CORRECT, R1_CORRECT], ground_truth=["0.5", "banana"]) == [1.0, None]


# --- format / tag_count / reasoning_steps --------------------------------------------------------


def test_format_default_and_custom_pattern():
    assert format_reward(conv(R1_CORRECT)).score == 1.0
    assert format_reward(conv("<think>short</think><answer>4</answer>\n")).score == 1.0  # \s* may be empty
    assert format_reward(conv("<answer>4</answer>")).score == 0.0  # no think block
    assert format_reward(conv(R1_CORRECT + "\nHope this helps!")).score == 0.0  # text after </answer>
    assert format_reward(conv("Sure! " + R1_CORRECT)).score == 0.0  # text before <think>
    custom = format_reward(conv("Reasoning...\nFinal: 72"), pattern=r".*^Final: \d+$", flags=re.S | re.M)
    assert custom.score == 1.0 and custom.metrics["full_match"].score == 1.0 and custom.reason


def test_tag_count_quarters():
    # all four tags exactly once: 4 * 0.25
    assert tag_count(conv(R1_CORRECT)).score == 1.0
    # no newlines around tags: only "\n</answer>" matches -> 0.25
    assert tag_count(conv("<think>x</think><answer>\n4\n</answer>")).score == 0.25
    # two think blocks: "<think>\n" and "\n</think>\n" occur twice -> only the answer tags count: 0.5
    twice = tag_count(conv("<think>\na\n</think>\n<think>\nb\n</think>\n<answer>\nc\n</answer>"))
    assert twice.score == 0.5 and twice.metrics["think_open"].score == 0.0
    assert twice.metrics["answer_close"].score == 1.0
    assert tag_count(conv("just 4")).score == 0.0


def test_reasoning_steps_counts_markers():
    # 3 "Step k:" markers -> min(1, 3/3) = 1
    assert reasoning_steps(conv("Step 1: read.\nStep 2: add.\nStep 3: check.")).score == 1.0
    # n=6 -> 3/6 = 0.5
    assert reasoning_steps(conv("Step 1: read.\nStep 2: add.\nStep 3: check."), n=6).score == 0.5
    # "First" and "Next" -> 2/3
    two = reasoning_steps(conv("First, add 2 and 3.\nNext, double it to get 10."))
    assert two.score == pytest.approx(2 / 3) and two.metrics["transition_words"].score == pytest.approx(2 / 3)
    # 2 bullets + 1 numbered line = 3 -> 1.0
    mixed = reasoning_steps(conv("Known:\n- apples: 3\n* pears: 4\n1. sum is 7"))
    assert mixed.score == 1.0 and mixed.metrics["bullets"].score == pytest.approx(2 / 3)
    # a decimal at the start of a line, a minus sign and lower-case "first" are not steps -> 0
    assert reasoning_steps(conv("3.5 is the first value, and -2 is next.")).score == 0.0
    # R1_CORRECT has "Step 1:" and "Step 2:" -> 2/3
    assert reasoning_steps(conv(R1_CORRECT)).score == pytest.approx(2 / 3)


# --- length (Kimi 1.5), batch ---------------------------------------------------------------------


def test_length_groups_with_given_correctness():
    completions = ["a" * 10, "a" * 20, "a" * 40, "b" * 15, "c" * 15]
    out = length_reward(
        [conv(c) for c in completions], group_ids=["g", "g", "g", "h", "h"], correct=[True, True, False, True, False]
    )
    # group g: min 10, max 40
    #   10 correct: 0.5 - 0/30 = 0.5
    #   20 correct: 0.5 - 10/30 = 0.1667
    #   40 wrong:   min(0, 0.5 - 30/30) = -0.5
    # group h: equal lengths -> 0 for both
    assert [r.score for r in out] == pytest.approx([0.5, 0.5 - 10 / 30, -0.5, 0.0, 0.0])
    assert out[1].metrics["relative_length"].score == pytest.approx(1 / 3) and all(r.reason for r in out)


def test_length_correctness_from_math_verify_and_token_lengths():
    completions = ["$\\boxed{2}$", "so $\\boxed{2}$", "so $\\boxed{3}$", "$\\boxed{5}$"]
    out = length_reward([conv(c) for c in completions], ground_truths=["2"] * 4, lengths=[100, 300, 200, 120])
    # one group, min 100, max 300 (token lengths given, characters ignored)
    #   100 correct: 0.5 - 0/200 = 0.5
    #   300 correct: 0.5 - 200/200 = -0.5   (correct but the longest is penalised)
    #   200 wrong:   min(0, 0.5 - 100/200 = 0) = 0
    #   120 wrong:   min(0, 0.5 - 20/200 = 0.4) = 0
    assert [r.score for r in out] == pytest.approx([0.5, -0.5, 0.0, 0.0])
    # unknown correctness (unparsable gold): no opinion, but its length still sets the range
    mixed = length_reward([conv("$\\boxed{2}$")] * 2, ground_truths=["banana", "2"], lengths=[10, 30])
    assert mixed[0].is_score_valid is False
    assert mixed[1].score == pytest.approx(0.5 - (30 - 10) / (30 - 10))  # = -0.5
    # default: the whole batch is one group, characters: 10, 20, 30 (all correct)
    #   -> 0.5 - 0/20 = 0.5, 0.5 - 10/20 = 0.0, 0.5 - 20/20 = -0.5
    out = length_reward([conv("a" * 10), conv("a" * 20), conv("a" * 30)], correct=[True, True, True])
    assert [r.score for r in out] == [0.5, 0.0, -0.5]


# --- cosine_length --------------------------------------------------------------------------------


def test_cosine_length_schedule():
    # r = lo + 0.5 * (hi - lo) * (1 + cos(pi * L / 1000))
    # correct (lo, hi) = (0.5, 1.0): L=0 -> 1.0, L=500 -> 0.5 + 0.25 * 1 = 0.75, L=1000 -> 0.5
    assert cosine_length(conv(""), correct=True).score == pytest.approx(1.0)
    assert cosine_length(conv("x" * 500), correct=True).score == pytest.approx(0.75)
    assert cosine_length(conv("x" * 1000), correct=True).score == pytest.approx(0.5)
    assert cosine_length(conv("x" * 2000), correct=True).score == pytest.approx(0.5)  # clipped at max_len
    # wrong (lo, hi) = (-0.5, -1.0): L=0 -> -1.0, L=250 -> -0.5 - 0.25 * (1 + 0.70711) = -0.92678, L=1000 -> -0.5
    assert cosine_length(conv(""), correct=False).score == pytest.approx(-1.0)
    assert cosine_length(conv("x" * 250), correct=False).score == pytest.approx(-0.5 - 0.25 * (1 + math.sqrt(0.5)))
    assert cosine_length(conv("x" * 1000), correct=False).score == pytest.approx(-0.5)
    # max_len=100, L=50, correct -> 0.75
    assert cosine_length(conv("x" * 50), correct=True, max_len=100).score == pytest.approx(0.75)


def test_cosine_length_correctness_from_gold():
    # \frac{1}{2} == 0.5 is correct; L = 250 given -> 0.5 + 0.25 * (1 + 0.70711) = 0.92678
    right = cosine_length(conv(R1_CORRECT), ground_truth="0.5", lengths=250)
    assert right.score == pytest.approx(0.5 + 0.25 * (1 + math.sqrt(0.5))) and right.metrics["correct"].score == 1.0
    wrong = cosine_length(conv(R1_WRONG), ground_truth="0.5", lengths=250)
    assert wrong.score == pytest.approx(-0.5 - 0.25 * (1 + math.sqrt(0.5)))
    unknown = cosine_length(conv(R1_CORRECT), ground_truth="banana")
    assert unknown.is_score_valid is False and unknown.reason


# --- repetition_penalty / soft_overlong -----------------------------------------------------------


def test_repetition_penalty():
    # 6 words, 4 trigrams, all unique -> 0
    assert repetition_penalty(conv("the cat sat on the mat")).score == 0.0
    # "a b c" x3: 9 words, 7 trigrams (abc bca cab abc bca cab abc), 3 unique -> -(1 - 3/7) = -4/7
    loop = "a b c a b c a b c"
    assert repetition_penalty(conv(loop)).score == pytest.approx(-4 / 7)
    assert repetition_penalty(conv(loop)).metrics["unique_ngram_fraction"].score == pytest.approx(3 / 7)
    # max_penalty 0.5 (either sign) -> -2/7
    assert repetition_penalty(conv(loop), max_penalty=0.5).score == pytest.approx(-2 / 7)
    assert repetition_penalty(conv(loop), max_penalty=-0.5).score == pytest.approx(-2 / 7)
    # bigrams of "go go go go": 3 bigrams, 1 unique -> -(1 - 1/3)
    assert repetition_penalty(conv("go go go go"), ngram_size=2).score == pytest.approx(-2 / 3)
    # lower-cased: "The cat. the cat." bigrams (the,cat.) (cat.,the) (the,cat.) -> 2/3 unique -> -1/3
    assert repetition_penalty(conv("The cat. the cat."), ngram_size=2).score == pytest.approx(-1 / 3)
    # a degenerate model loop: 5 x "I will check again." = 20 words, 18 trigrams, 4 unique -> -(1 - 4/18)
    stuck = " ".join(["I will check again."] * 5)
    assert repetition_penalty(conv(stuck)).score == pytest.approx(-(1 - 4 / 18))
    # empty / shorter than n -> 0
    assert repetition_penalty(conv("")).score == 0.0 and repetition_penalty(conv("hi there")).score == 0.0


def test_soft_overlong():
    opts = {"max_completion_len": 100, "cache_len": 20}  # free up to 80, linear penalty on (80, 100]
    assert soft_overlong(conv("x" * 80), **opts).score == 0.0
    assert soft_overlong(conv("x" * 81), **opts).score == pytest.approx(-1 / 20)  # (80 - 81) / 20
    assert soft_overlong(conv("x" * 90), **opts).score == pytest.approx(-0.5)  # (80 - 90) / 20
    assert soft_overlong(conv("x" * 100), **opts).score == pytest.approx(-1.0)  # (80 - 100) / 20
    assert soft_overlong(conv("x" * 101), **opts).score == -1.0  # over L_max
    # token count given: 95 -> (80 - 95) / 20 = -0.75
    assert soft_overlong(conv("short"), completion_length=95, **opts).score == pytest.approx(-0.75)
    # DAPO defaults 20480 / 4096: 5000 characters are free
    assert soft_overlong(conv("x" * 5000)).score == 0.0
    with pytest.raises(ValueError, match="cache_len"):
        soft_overlong(conv("x"), max_completion_len=10, cache_len=20)


# --- registry map, options and the TRL adapter -----------------------------------------------------

C0 = R1_CORRECT
C1 = "It is $\\boxed{3}$. It is $\\boxed{3}$."
TRL_KWARGS = {
    "ground_truth": ["0.5", "0.5"],
    "lengths": [0, 1000],
    "completion_length": [18432, 10],
    "difficulty": ["easy", "hard"],
}
EXPECTED_TRL = {
    "math_accuracy": [1.0, 0.0],
    "format": [1.0, 0.0],
    "tag_count": [1.0, 0.0],
    "reasoning_steps": [2 / 3, 0.0],  # "Step 1:", "Step 2:" -> 2/3
    "length": [0.5, -0.5],  # lengths 0 (correct) and 1000 (wrong): 0.5, min(0, -0.5)
    "cosine_length": [1.0, -0.5],  # correct at L=0 -> 1.0; wrong at L=max_len -> -0.5
    "repetition_penalty": [0.0, -0.25],  # C1: 6 words, 4 trigrams, 3 unique -> -(1 - 3/4)
    "soft_overlong": [-0.5, 0.0],  # (16384 - 18432) / 4096 = -0.5; 10 tokens free
}


def test_math_accuracy_off_the_main_thread():
    # math-verify's signal-based timeout only works in the main thread; it is skipped elsewhere
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(math_accuracy, conv(R1_CORRECT), "0.5").result().score == 1.0


def test_registry_names_match_ids():
    assert set(BUILTIN_TEXT) == set(EXPECTED_TRL)
    for name, fn in BUILTIN_TEXT.items():
        assert fn.reward_id == name and fn.__doc__ and fn.reward_mode == ("batch" if name == "length" else "pointwise")


@pytest.mark.parametrize("name", sorted(EXPECTED_TRL))
def test_each_builtin_through_trl_adapter(name):
    trl_reward = BUILTIN_TEXT[name].as_trl()
    assert trl_reward.__name__ == name
    prompts = [[PROMPT], [PROMPT]]
    completions = [[{"role": "assistant", "content": C0}], [{"role": "assistant", "content": C1}]]
    assert trl_reward(prompts, completions, **TRL_KWARGS) == pytest.approx(EXPECTED_TRL[name])


def test_with_options_binds_scalars_for_trl_and_score_batch():
    small = with_options(soft_overlong, max_completion_len=100, cache_len=20)
    assert small.reward_id == "soft_overlong" and small.reward_mode == "pointwise"
    assert small.as_trl()(["p", "p"], ["x" * 90, "y"]) == pytest.approx([-0.5, 0.0])
    grouped = with_options(length_reward, correct=[True, True, True, True])
    out = score_batch(grouped, [conv("a" * n) for n in (10, 30, 5, 5)], group_ids=[0, 0, 1, 1])
    assert [r.score for r in out] == pytest.approx([0.5, -0.5, 0.0, 0.0])
