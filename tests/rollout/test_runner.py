"""The episode runner: prompt building, action parsing, invalid steps, history window, groups."""

from __future__ import annotations

import functools

import pytest

from grouprl.records import Observation
from grouprl.rollout.prompts import build_messages, parse_action
from grouprl.rollout.generation import HFBackend, SamplingParams
from grouprl.rollout.runner import EpisodeSettings, run_episodes
from grouprl.tasks.envs import GridWorld

OBS = Observation(text="board now", anchor_state=1, admissible_actions=["up", "down"])


def test_build_messages_window_and_admissible():
    history = [("o1", "a1"), ("o2", "a2"), ("o3", "a3")]
    msgs = build_messages("rules", history, OBS, history_length=2)
    assert msgs == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "o2"},
        {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "o3"},
        {"role": "assistant", "content": "a3"},
        {"role": "user", "content": "board now\nAdmissible actions: up, down"},
    ]
    assert build_messages("", history, OBS, 0, show_admissible=False) == [{"role": "user", "content": "board now"}]
    own = Observation(text="q", anchor_state=0, messages=[{"role": "user", "content": "q"}])
    assert build_messages("rules", history, own, 2) == own.messages  # a single-turn row renders itself


@pytest.mark.parametrize(
    "completion,expected",
    [
        ("<action>up</action>", "up"),
        ("thinking... <action>left</action> then <action> DOWN </action>", "down"),  # last tag, admissible spelling
        ("up", None),  # no tag
        ("<action>jump</action>", None),  # inadmissible
    ],
)
def test_parse_action(completion, expected):
    assert parse_action(completion, r"<action>(.*?)</action>", ["up", "down", "left"]).action == expected


def test_parse_action_whole_text_and_custom_pattern():
    assert parse_action("  Final: 3 ", None, None).action == "Final: 3"
    assert parse_action("ACT[right]", r"ACT\[(.*?)\]", ["right"]).action == "right"
    assert "inadmissible" in parse_action("<action>jump</action>", r"<action>(.*?)</action>", ["up"]).reason


def _run(model_dir, options, n_groups=2, group_size=3, seeds=(3, 4), max_new_tokens=8, prompt=None):
    from grouprl.models.loading import auto_tokenizer
    from transformers import AutoModelForCausalLM

    tok = auto_tokenizer(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    factories = [functools.partial(GridWorld, size=4, max_steps=20, instructions=prompt)] * n_groups
    rows = [{"seed": s} for s in seeds[:n_groups]]
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0)
    return run_episodes(
        factories,
        rows,
        group_size,
        HFBackend(model, tok, "cpu"),
        tok,
        params,
        settings=options,
        seeds=list(seeds[:n_groups]),
    )


def test_untrained_model_makes_invalid_steps_that_are_penalized_and_do_not_advance(tiny_grid_dir):
    options = EpisodeSettings(max_steps=3, history_length=2, invalid_action_penalty=0.1)
    episodes = _run(tiny_grid_dir, options)
    assert [(e.group_id, e.index_in_group) for e in episodes] == [(g, k) for g in range(2) for k in range(3)]
    for ep in episodes:
        first = ep.steps[0]
        # every episode of a group starts from the same state, seeded by its group's seed
        assert first.anchor_state == episodes[3 * ep.group_id].steps[0].anchor_state
        assert len(ep.steps) == 3  # random text is never '<action>up</action>': all invalid, never done
        for s in ep.steps:
            assert not s.valid and s.penalty == 0.1 and s.invalid_reason and s.env_reward == 0.0
            assert s.anchor_state == first.anchor_state  # the environment did not move
        # history window: step t shows min(t, 2) earlier (observation, action) pairs
        assert [sum(m["role"] == "assistant" for m in s.messages) for s in ep.steps] == [0, 1, 2]
        assert ep.steps[2].messages[2]["content"] == ep.steps[0].action_text
    assert episodes[0].steps[0].anchor_state != episodes[3].steps[0].anchor_state  # another seed, another map


def test_valid_actions_advance_through_the_same_runner(warm_grid_dir):
    from conftest import GRID_PROMPT

    options = EpisodeSettings(max_steps=6, history_length=1, action_pattern=None, show_admissible_actions=False)
    episodes = _run(warm_grid_dir, options, max_new_tokens=6, prompt=GRID_PROMPT)
    steps = [s for ep in episodes for s in ep.steps]
    valid = [s for s in steps if s.valid]
    assert len(valid) >= len(steps) // 2  # the warmed model mostly answers in format
    for ep in episodes:
        assert len(ep.steps) <= 6
        for before, after in zip(ep.steps, ep.steps[1:]):
            if not before.valid:
                assert after.anchor_state == before.anchor_state
        if ep.done:  # the environment ended it: reached the goal or fell in a hole
            assert ep.steps[-1].env_info.get("success") is not None
    assert any(ep.steps[0].anchor_state != ep.steps[-1].anchor_state for ep in episodes)  # it moved somewhere
