"""GymTextEnv: real gymnasium environments (FrozenLake, CartPole) behind the text protocol."""

from __future__ import annotations

import functools
import pickle

import pytest
from conftest import trajectory

gymnasium = pytest.importorskip("gymnasium")
np = pytest.importorskip("numpy")

from grouprl.records import Observation, StepResult
from grouprl.tasks.envs.gym_text import GymTextEnv, frozen_lake_text, stable_anchor

NAMES = ["left", "down", "right", "up"]  # FrozenLake: 0 left, 1 down, 2 right, 3 up
# The non-slippery 4x4 map:  SFFF / FHFH / FFFH / HFFG
TO_GOAL = ["down", "down", "right", "right", "down", "right"]


def frozen_lake(**kwargs) -> GymTextEnv:
    env = gymnasium.make(
        "FrozenLake-v1", map_name="4x4", is_slippery=kwargs.pop("is_slippery", False), render_mode="ansi"
    )
    return GymTextEnv(env, action_names=NAMES, **kwargs)


# --- FrozenLake ---------------------------------------------------------------------------------


def test_frozen_lake_reaches_goal_with_success():
    env = frozen_lake(observation_text="ansi")
    obs = env.reset(0)
    assert isinstance(obs, Observation) and obs.anchor_state == 0
    assert obs.admissible_actions == NAMES
    results = [env.step(a) for a in TO_GOAL]
    assert all(isinstance(r, StepResult) for r in results)
    assert [r.done for r in results] == [False] * 5 + [True]
    assert [r.reward for r in results] == [0.0] * 5 + [1.0]
    last = results[-1]
    assert last.info["success"] is True and last.info["terminated"] is True and last.info["truncated"] is False
    assert "prob" in last.info  # gymnasium's own info is kept
    assert last.observation.anchor_state == 15
    assert all(r.info["success"] is False for r in results[:-1])
    # After the end, further actions are refused.
    after = env.step("up")
    assert after.done and after.info["invalid"] and after.reward == 0.0


def test_frozen_lake_hole_ends_without_success():
    env = frozen_lake()
    env.reset(0)
    assert not env.step("right").done
    result = env.step("down")  # (1, 1) is a hole
    assert result.done and result.reward == 0.0
    assert result.info["success"] is False and result.info["terminated"] is True
    assert result.observation.anchor_state == 5


def test_frozen_lake_action_text_forms():
    env = frozen_lake()
    env.reset(0)
    assert env.step("<action>Right</action>").observation.anchor_state == 1
    assert env.step("  LEFT \n").observation.anchor_state == 0
    assert env.step("I go <action>down</action>").observation.anchor_state == 4


def test_invalid_action_does_not_advance():
    env = frozen_lake(observation_text="ansi")
    env.reset(0)
    env.step("right")
    before_text, before_state = env.env.render(), env.env.unwrapped.s
    for bad in ["jump", "", "2", "<action>north</action>"]:
        result = env.step(bad)
        assert result.info["invalid"] is True and result.reward == 0.0 and result.done is False
        assert "expected one of" in result.info["reason"]
        assert result.observation.anchor_state == 1
    assert env.env.unwrapped.s == before_state and env.env.render() == before_text
    assert env.step("right").observation.anchor_state == 2  # still playable from where it was


def test_text_is_the_render_function_output():
    ansi = frozen_lake(observation_text="ansi")
    obs = ansi.reset(0)
    assert obs.text == ansi.env.render()
    assert "\x1b[41mS\x1b[0m" in obs.text
    result = ansi.step("right")
    assert result.observation.text == ansi.env.render()

    drawn = frozen_lake(observation_text=frozen_lake_text)
    assert drawn.reset(0).text == "PFFF\nFHFH\nFFFH\nHFFG"
    assert drawn.step("down").observation.text == "SFFF\nPHFH\nFFFH\nHFFG"

    default = frozen_lake()
    assert default.reset(0).text == "0"
    assert default.step("down").observation.text == "4"

    custom = frozen_lake(observation_text=lambda obs, env: f"cell {obs}")
    assert custom.reset(0).text == "cell 0"


def test_same_seed_same_trajectory_slippery():
    actions = ["right", "down", "right", "down", "left", "up", "right", "down"] * 4
    a, b = frozen_lake(is_slippery=True), frozen_lake(is_slippery=True)
    first = trajectory(a, 3, actions)
    assert first == trajectory(b, 3, actions)
    assert first == trajectory(a, 3, actions)  # a reused env resets to the same episode
    # The slippery dynamics actually depend on the seed.
    assert any(trajectory(a, s, actions) != first for s in range(4, 12))


def test_frozen_lake_defaults_and_instructions():
    env = GymTextEnv("FrozenLake-v1", make_kwargs={"map_name": "4x4", "is_slippery": False})
    obs = env.reset(None)
    assert obs.admissible_actions == ["0", "1", "2", "3"]
    assert env.step("2").observation.anchor_state == 1
    assert env.step("right").info["invalid"]
    assert "0, 1, 2, 3" in env.instructions
    named = frozen_lake(instructions="Reach G.")
    assert named.instructions == "Reach G."
    assert "left, down, right, up" in frozen_lake().instructions


def test_factory_is_picklable():
    factory = functools.partial(
        GymTextEnv,
        "FrozenLake-v1",
        make_kwargs={"map_name": "4x4", "is_slippery": False},
        observation_text=frozen_lake_text,
        action_names=NAMES,
    )
    env = pickle.loads(pickle.dumps(factory))()
    assert env.reset(0).text.startswith("P")


def test_bad_arguments_are_explained():
    with pytest.raises(ValueError, match="3 names"):
        GymTextEnv(gymnasium.make("FrozenLake-v1"), action_names=["a", "b", "c"])
    with pytest.raises(ValueError, match="distinct"):
        GymTextEnv(gymnasium.make("FrozenLake-v1"), action_names=["a", "A", "b", "c"])
    with pytest.raises(ValueError, match="render_mode='ansi'"):
        GymTextEnv(gymnasium.make("FrozenLake-v1"), observation_text="ansi")
    with pytest.raises(RuntimeError, match="reset"):
        frozen_lake().step("left")


# --- CartPole: numpy observations ---------------------------------------------------------------


def test_cartpole_numpy_anchor_and_seeding():
    a, b = GymTextEnv("CartPole-v1", action_names=["push left", "push right"]), GymTextEnv("CartPole-v1")
    oa, ob = a.reset(5), b.reset(5)
    hash(oa.anchor_state)
    assert oa.anchor_state == ob.anchor_state and oa.text == ob.text
    assert oa.text == str(a._obs)
    assert a.reset(6).anchor_state != oa.anchor_state
    # Same seed, same actions: same observations and anchors, step after step.
    actions = [0, 1, 1, 0, 1, 0, 0, 1]
    a.reset(5)
    b.reset(5)
    for i in actions:
        ra, rb = a.step(["push left", "push right"][i]), b.step(str(i))
        assert ra.observation.anchor_state == rb.observation.anchor_state
        assert ra.observation.text == rb.observation.text and ra.reward == rb.reward == 1.0
    # The anchor is a stable value (the same bytes hash in every process), not the array itself.
    assert stable_anchor(np.array([1.0, 2.0], dtype=np.float32)) == stable_anchor(np.array([1.0, 2.0], np.float32))
    assert stable_anchor(np.array([1.0, 2.0])) != stable_anchor(np.array([1.0, 2.5]))
    assert stable_anchor({"b": np.int64(2), "a": [np.zeros(2)]}) == stable_anchor({"a": [np.zeros(2)], "b": 2})


def test_cartpole_truncation_and_custom_success():
    survive = GymTextEnv(
        "CartPole-v1",
        make_kwargs={"max_episode_steps": 3},
        success=lambda reward, terminated, truncated, info: truncated,
    )
    survive.reset(0)
    results = [survive.step(a) for a in ["0", "1", "0"]]
    last = results[-1]
    assert last.done and last.info["truncated"] is True and last.info["terminated"] is False
    assert last.info["success"] is True
    default = GymTextEnv("CartPole-v1", make_kwargs={"max_episode_steps": 3})
    default.reset(0)
    assert [default.step("1").info["success"] for _ in range(3)] == [False, False, False]


def test_custom_anchor_key():
    env = GymTextEnv("CartPole-v1", anchor_key=lambda obs: round(float(obs[0]), 1))
    assert env.reset(0).anchor_state == round(float(env._obs[0]), 1)


# --- non-Discrete action spaces -----------------------------------------------------------------


def test_non_discrete_space_needs_parse_action():
    with pytest.raises(ValueError, match=r"Box\(-1\.0, 1\.0, \(1,\), float32\)") as error:
        GymTextEnv("MountainCarContinuous-v0")
    assert "parse_action" in str(error.value)


def test_non_discrete_with_parse_action():
    def parse(text: str):
        return np.array([float(text)], dtype=np.float32)

    env = GymTextEnv("MountainCarContinuous-v0", parse_action=parse)
    obs = env.reset(0)
    assert obs.admissible_actions is None
    result = env.step("0.5")
    assert not result.info.get("invalid") and result.observation.anchor_state != obs.anchor_state
    state = env._obs.copy()
    for bad in ["fast", "3.0"]:  # unparsable; outside the Box
        bad_result = env.step(bad)
        assert bad_result.info["invalid"] is True and bad_result.reward == 0.0 and not bad_result.done
    assert np.array_equal(env._obs, state)
