"""Per-turn credit on dependent calls played by the example agent: runs that looked up the same factor share
an anchor at the calculator turn, and GiGPO tells the right calculator call from the wrong one there, where
GRPO gives every turn of an episode the same advantage."""

from pathlib import Path

import torch

from grouprl.algos.advantages import get_estimator
from grouprl.rewards.scorer import Scorer
from grouprl.rollout.agent.runner import AgentSettings, run_agent_episodes
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.scripted import ScriptedBackend
from grouprl.tasks.tool_arithmetic import ToolAnswerEnv, expert_reply, rows
from grouprl.tools.parsers import PARSERS, ToolCall
from grouprl.train.advantages import compute_advantage_record
from grouprl.train.step_metrics import batch_metrics
from grouprl.user_code import import_callable

ROOT = Path(__file__).resolve().parents[3]
CALCULATOR = str(ROOT / "examples" / "agents" / "calculator_agent.py") + ":run"


def call(name, **arguments):
    return PARSERS["hermes"].format_calls([ToolCall(name, arguments)])


def scripted(turns):
    """The expert, except for the turns given (turn index -> reply)."""

    def reply(prompt):
        t = prompt.count("<|im_start|>assistant")  # the assistant turns already taken, plus this one's header
        return turns.get(t - 1) or expert_reply(prompt)

    return reply


def test_dependent_calls_share_anchors_and_gigpo_credits_the_calculator_turn(tokenizer):
    row = rows(1, 0, "convert")[0]  # How many feet are in 15 miles? (lookup mile, then 15 * 5280)
    n = row["question"].split()[-2]
    scripts = [
        {},
        {},
        {1: call("calculator", expression=f"{n} * 5281")},  # right lookup, wrong factor copied
        {0: call("lookup", unit="yard")},
    ]  # wrong unit first: its later turns are in a state of their own
    settings = AgentSettings(agent=import_callable(CALCULATOR, "agent"))
    episodes = []
    for k, script in enumerate(scripts):  # one run per script, then made one group (the reply reads the prompt)
        (ep,) = run_agent_episodes(
            [lambda: ToolAnswerEnv(row["question"], row["ground_truth"])],
            [row],
            1,
            ScriptedBackend(tokenizer, scripted(script)),
            tokenizer,
            SamplingParams(max_new_tokens=200),
            settings,
            [row["seed"]],
        )
        ep.index_in_group = k
        episodes.append(ep)
    assert [ep.success for ep in episodes] == [True, True, False, False]
    assert [len(ep.steps) for ep in episodes] == [3, 3, 3, 3]

    scored = Scorer([], []).score(episodes)
    algorithm = type("A", (), {"anchor_mode": "exact", "similarity_threshold": 0.95, "gamma": 0.95})()
    gigpo = compute_advantage_record(
        episodes,
        scored.episode,
        [v.step_rewards for v in scored.verdicts],
        algorithm,
        get_estimator("gigpo"),
        {"gamma": 0.95, "step_advantage_weight": 1.0},
    )
    grpo = compute_advantage_record(
        episodes, scored.episode, [v.step_rewards for v in scored.verdicts], algorithm, get_estimator("grpo"), {}
    )
    states = [s.anchor_state for ep in episodes for s in ep.steps]
    sizes = gigpo.anchor_size.tolist()
    assert states[0::3] == ["start"] * 4 and sizes[0::3] == [4] * 4
    # the calculator turn: the three runs that looked up "mile" are in one state; the "yard" run alone
    assert len({states[1], states[4], states[7]}) == 1 and states[1].startswith("lookup")
    assert sizes[1] == sizes[4] == sizes[7] == 3 and sizes[10] == 1
    # the answer turn: the two experts share a state; the wrong calculator result is a state of its own
    assert states[2] == states[5] != states[8] and sizes[2] == 2 and sizes[8] == 1
    step = gigpo.step_advantage.tolist()
    assert step[1] == step[4] > 0 > step[7]  # the right calculator call beats the wrong one at the same state
    assert step[10] == 0.0 and step[8] == 0.0  # a singleton anchor has no step advantage
    # GRPO: every turn of the episode with the wrong calculator call carries its one episode advantage
    grpo_adv = grpo.advantage.tolist()
    assert grpo_adv[6] == grpo_adv[7] == grpo_adv[8] < 0
    assert gigpo.advantage[7] < gigpo.advantage[6]  # GiGPO blames the calculator turn more than the lookup turn

    metrics = batch_metrics(episodes, scored, gigpo, 4, [], True)
    assert metrics["anchor_nonsingleton_share"] == 9 / 12  # the yard run's two later turns, the wrong answer turn
    assert metrics["anchor_nonsingleton_share_later_turns"] == 5 / 8
    assert torch.equal(torch.tensor(sizes), gigpo.anchor_size)
