"""Credit per turn in conversation episodes: final-answer and per-turn rewards, GiGPO on tool-state anchors."""

from grouprl.algos.advantages import get_estimator
from grouprl.records import EvaluateResult, StepOutput
from grouprl.rewards import registry
from grouprl.rewards.kit import reward_function
from grouprl.rewards.scorer import Scorer
from grouprl.rollout.conversation import ConversationSettings, run_conversation_episodes
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tasks.tool_arithmetic import ToolAnswerEnv, expert_reply, make_row
from grouprl.tools import resolve_tools
from grouprl.train.advantages import compute_advantage_record


def convert_row():
    return next(
        make_row(s) for s in range(100) if make_row(s)["kind"] == "convert" and "mile" not in make_row(s)["question"]
    )


WASTED = '<tool_call>{"name": "lookup", "arguments": {"unit": "mile"}}</tool_call>'


def group(tokenizer, row):
    """Four episodes of one question: two expert ones, two that first waste a lookup of the wrong unit and
    one that repeats it (so its state does not change)."""
    scripts = [None, None, [WASTED], [WASTED, WASTED]]
    episodes = []
    for script in scripts:
        turns = list(script or [])

        def reply(prompt, turns=turns):
            return turns.pop(0) if turns else expert_reply(_without_wasted(prompt))

        episodes += run_conversation_episodes(
            [lambda: ToolAnswerEnv(row["question"], row["ground_truth"])],
            [row],
            1,
            ScriptedBackend(tokenizer, reply),
            tokenizer,
            SamplingParams(max_new_tokens=200),
            ConversationSettings(tools=resolve_tools(["calculator", "lookup"])),
            [0],
        )
    for k, ep in enumerate(episodes):
        ep.index_in_group = k
    return episodes


def _without_wasted(prompt):
    """The prompt as the expert would read it: the wasted lookups' results taken out."""
    return prompt.replace("<|im_start|>user\n<tool_response>\n1 mile = 5280 feet\n</tool_response><|im_end|>\n", "")


@reward_function
def tool_step_cost(messages, ground_truth=None, **kwargs):
    turns = [m for m in messages if m.role == "assistant"]
    return EvaluateResult(
        score=0.0,
        step_outputs=[StepOutput(step_index=i, base_reward=-0.05) for i, m in enumerate(turns) if m.tool_calls],
    )


def test_final_answer_and_per_turn_rewards(tokenizer):
    row = convert_row()
    episodes = group(tokenizer, row)
    assert [len(ep.steps) for ep in episodes] == [3, 3, 4, 5] and all(ep.success for ep in episodes)
    registry.REWARDS["tool_step_cost"] = tool_step_cost
    verdicts = Scorer(["tool_step_cost"], [1.0]).score(episodes).verdicts
    for ep, v in zip(episodes, verdicts):
        # every turn that called a tool costs 0.05; the answer turn gets the environment's 1.0
        assert [round(r, 2) for r in v.step_rewards] == [-0.05] * (len(ep.steps) - 1) + [1.0]
        assert v.score == 1.0  # step outputs are step credit; the episode score is the outcome


def test_gigpo_anchors_on_the_tool_state(tokenizer):
    row = convert_row()
    episodes = group(tokenizer, row)
    registry.REWARDS["tool_step_cost"] = tool_step_cost
    scored = Scorer(["tool_step_cost"], [1.0]).score(episodes)
    algorithm = type("A", (), {"anchor_mode": "exact", "similarity_threshold": 0.95, "gamma": 0.9})()
    record = compute_advantage_record(
        episodes,
        scored.episode,
        [v.step_rewards for v in scored.verdicts],
        algorithm,
        get_estimator("gigpo"),
        {"gamma": 0.9},
    )
    states = [s.anchor_state for ep in episodes for s in ep.steps]
    sizes = dict(zip(states, record.anchor_size.tolist()))
    assert sizes["start"] == 4  # every episode's first turn
    wasted_state = next(s for s in states if s.startswith("lookup") and "mile" in s and "|" not in s)
    assert sizes[wasted_state] == 3  # episode 3 repeated the wasted lookup: same state, twice, plus episode 2's
    first_turns = [i for i, s in enumerate(states) if s == "start"]
    step_adv = record.step_advantage[first_turns].tolist()
    assert step_adv[0] == step_adv[1] > step_adv[2] > step_adv[3]  # the useful first call beats the wasted ones
