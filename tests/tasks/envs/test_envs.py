"""The seeded text environments: reproducibility, rewards, invalid actions, safe calculator."""

from __future__ import annotations

import pytest
from conftest import trajectory

from grouprl.records import Observation, StepResult
from grouprl.tasks.envs import ENVIRONMENTS, Calculator, GridWorld, Maze, Sokoban
from grouprl.tasks.envs.calculator import calculate
from grouprl.tasks.envs.gridworld import MOVES

ACTION_SEQUENCE = ["up", "right", "<action>down</action>", "left", "right", "right", "down", "up"] * 3


def test_registry():
    assert ENVIRONMENTS == {"gridworld": GridWorld, "sokoban": Sokoban, "maze": Maze, "calculator": Calculator}


# --- gridworld ----------------------------------------------------------------------------------


@pytest.mark.parametrize("slippery", [0.0, 0.3])
def test_gridworld_same_seed_same_trajectory(slippery):
    a, b = GridWorld(size=5, slippery=slippery), GridWorld(size=5, slippery=slippery)
    assert trajectory(a, 7, ACTION_SEQUENCE) == trajectory(b, 7, ACTION_SEQUENCE)
    # A reused env resets to the same episode.
    assert trajectory(a, 7, ACTION_SEQUENCE) == trajectory(b, 7, ACTION_SEQUENCE)


def test_gridworld_slippery_actually_slips_reproducibly():
    env = GridWorld(size=6, hole_fraction=0.0, slippery=0.5, max_steps=200)
    env.reset(1)
    slips = [env.step("up").info["slipped"] for _ in range(40)]
    assert any(slips) and not all(slips)
    env.reset(1)
    assert [env.step("up").info["slipped"] for _ in range(40)] == slips


def test_gridworld_observation_format():
    obs = GridWorld().reset(0)
    assert isinstance(obs, Observation)
    assert obs.messages is None  # the runner's prompt builder renders it
    assert "<action>up</action>" in GridWorld().instructions
    assert obs.text.count("P") == 1
    assert obs.admissible_actions == ["up", "down", "left", "right"]
    hash(obs.anchor_state)


def test_gridworld_different_seeds_different_maps():
    maps = {GridWorld(size=5).reset(seed).text for seed in range(20)}
    assert len(maps) > 10


@pytest.mark.parametrize("seed", range(25))
def test_gridworld_goal_reachable(seed):
    env = GridWorld(size=5, hole_fraction=0.3)
    env.reset(seed)
    assert env.shortest_path
    for i, move in enumerate(env.shortest_path):
        result = env.step(move)
        assert result.done == (i == len(env.shortest_path) - 1)
    assert result.reward == 1.0 and result.info["success"]


def test_gridworld_hole_ends_episode():
    for seed in range(100):
        env = GridWorld(size=4, hole_fraction=0.3)
        env.reset(seed)
        r, c = env.pos
        for move, (dr, dc) in MOVES.items():
            nr, nc = r + dr, c + dc
            if 0 <= nr < env.size and 0 <= nc < env.size and env.grid[nr][nc] == "H":
                result = env.step(move)
                assert result.done and result.reward == 0.0 and result.info["fell"]
                assert env.step("up").done  # stays over
                return
    pytest.fail("no seed put a hole next to the start")


def test_gridworld_invalid_action_does_not_advance():
    env = GridWorld(slippery=0.5)
    obs = env.reset(3)
    for bad in ["jump", "", "<action>north</action>", "up up"]:
        result = env.step(bad)
        assert result.info == {"invalid": True} and result.reward == 0.0 and not result.done
        assert result.observation.anchor_state == obs.anchor_state
        assert result.observation.text == obs.text
    assert env.steps == 0
    # Invalid actions do not consume slip draws either: the rest matches a clean episode.
    clean = GridWorld(slippery=0.5)
    clean.reset(3)
    for action in ACTION_SEQUENCE:
        a, b = env.step(action), clean.step(action)
        assert (a.observation.anchor_state, a.reward, a.done, a.info) == (
            b.observation.anchor_state,
            b.reward,
            b.done,
            b.info,
        )
        if a.done:
            break


def test_gridworld_max_steps_truncates():
    for seed in range(50):
        env = GridWorld(size=4, hole_fraction=0.0, max_steps=3)
        env.reset(seed)
        if env.grid[0][env.pos[1]] == "G" or "G" in env.grid[env.pos[0]]:
            continue  # walking up/left could reach the goal
        results = [env.step(a) for a in ["up", "left", "up"]]
        assert [r.done for r in results] == [False, False, True]
        assert results[-1].info["truncated"] and results[-1].reward == 0.0
        return
    pytest.fail("no suitable seed")


# --- sokoban ------------------------------------------------------------------------------------


def test_sokoban_same_seed_same_trajectory():
    assert trajectory(Sokoban(), 5, ACTION_SEQUENCE) == trajectory(Sokoban(), 5, ACTION_SEQUENCE)
    obs = Sokoban(boxes=2).reset(5)
    assert obs.text == Sokoban(boxes=2).reset(5).text
    hash(obs.anchor_state)
    assert obs.admissible_actions == ["up", "down", "left", "right"]


def test_sokoban_different_seeds_different_rooms():
    rooms = {Sokoban().reset(seed).text for seed in range(20)}
    assert len(rooms) > 10


@pytest.mark.parametrize("boxes,seeds", [(1, range(20)), (2, range(8))])
def test_sokoban_rooms_solvable(boxes, seeds):
    for seed in seeds:
        env = Sokoban(size=6, boxes=boxes)
        env.reset(seed)
        assert env.solution
        for i, move in enumerate(env.solution):
            result = env.step(move)
            assert result.info["optimal_steps"] == len(env.solution)
            assert result.done == (i == len(env.solution) - 1)
        assert result.reward == 1.0 and result.info["success"]
        assert "$" not in result.observation.text


def test_sokoban_push_box_into_wall_does_not_move():
    env = Sokoban(size=6)
    # Handcrafted room: box against the right wall, player to its left.
    env.reset(0)
    env.walls = frozenset({(r, c) for r in range(6) for c in range(6) if r in (0, 5) or c in (0, 5)})
    env.targets = frozenset({(1, 1)})
    env.player, env.boxes = (2, 3), frozenset({(2, 4)})
    result = env.step("right")
    assert not result.info["moved"] and env.player == (2, 3) and env.boxes == frozenset({(2, 4)})
    result = env.step("left")  # walk away, then push the box from the other side
    assert result.info["moved"] and env.player == (2, 2)
    env.player = (1, 2)
    assert not env.step("up").info["moved"] and env.player == (1, 2)  # plain wall
    env.player, env.boxes = (2, 2), frozenset({(2, 3), (2, 4)})
    assert not env.step("right").info["moved"]  # box into box
    assert env.boxes == frozenset({(2, 3), (2, 4)})
    env.player = (2, 4)
    env.boxes = frozenset({(2, 3)})
    env.step("left")
    assert env.boxes == frozenset({(2, 2)}) and env.player == (2, 3)


def test_sokoban_invalid_action_does_not_advance():
    env = Sokoban()
    obs = env.reset(2)
    result = env.step("push")
    assert result.info["invalid"] and result.reward == 0.0 and not result.done
    assert result.observation.anchor_state == obs.anchor_state and env.steps == 0


# --- calculator ---------------------------------------------------------------------------------


def test_calculator_expressions():
    assert calculate("2+3*4") == "14"
    assert calculate("(1 + 2) * -3") == "-9"
    assert calculate("7 // 2") == "3" and calculate("7 % 4") == "3" and calculate("2 ** 10") == "1024"
    assert calculate("10 / 4") == "2.5" and calculate("10 / 2") == "5"
    assert calculate("10/0").startswith("error:")
    assert calculate("10 % 0").startswith("error:")
    assert calculate("2 ** 100000").startswith("error:")
    assert calculate("(10 ** 60) ** 60").startswith("error:")
    assert calculate("(-8) ** 0.5").startswith("error:")
    for unsafe in [
        "__import__('os')",
        "open('/etc/passwd')",
        "().__class__",
        "x",
        "'a' * 3",
        "True + 1",
        "[1, 2]",
        "lambda: 1",
        "1 if 1 else 2",
        "(" * 150 + "1" + ")" * 150,
        "1" * 300,
    ]:
        assert calculate(unsafe).startswith("error:"), unsafe


def test_calculator_episode():
    env = Calculator("What is 2 + 3 * 4?", 14)
    first = env.reset(0)
    assert first.text == "What is 2 + 3 * 4?" and "<action>calc(" in env.instructions
    result = env.step("calc(2+3*4)")
    assert not result.done and result.reward == 0.0 and result.info["result"] == "14"
    assert result.observation.text.endswith("calc(2+3*4) = 14")
    assert result.observation.anchor_state == (env.question_id, ("14",))
    result = env.step("<action>calc(10/0)</action>")
    assert not result.done and result.info["calc_error"]
    assert "error" in result.observation.text.splitlines()[-1]
    result = env.step("calc(__import__('os'))")
    assert not result.done and result.info["calc_error"]
    result = env.step("Final: 14")
    assert result.done and result.reward == 1.0 and result.info["correct"]


def test_calculator_wrong_and_garbage():
    env = Calculator("q", "14")
    obs = env.reset()
    for garbage in ["hello", "the answer is 14", "calc 2+2", "Final: fourteen", ""]:
        result = env.step(garbage)
        assert result.info == {"invalid": True} and result.reward == 0.0 and not result.done
        assert result.observation.text == obs.text and result.observation.anchor_state == obs.anchor_state
    result = env.step("Let me think.\nFinal: 13")
    assert result.done and result.reward == 0.0


def test_calculator_numeric_equality_and_rows():
    env = Calculator.from_row({"question": "q", "ground_truth": "1080"})
    env.reset()
    assert env.step("Final: 1,080.00").reward == 1.0
    env = Calculator.from_row({"question": "1+23", "ground_truth": "42", "answer_reversed": True})
    env.reset()
    assert env.step("Final: 24").reward == 1.0


def test_calculator_max_calls():
    env = Calculator("q", 1, max_calls=2)
    env.reset()
    assert not env.step("calc(1)").done and not env.step("calc(1)").done
    result = env.step("calc(1)")
    assert result.done and result.reward == 0.0 and result.info["truncated"]


def test_step_results_are_records():
    for env in (GridWorld(), Sokoban(), Calculator("q", 1)):
        env.reset(0)
        assert isinstance(env.step("up"), StepResult)
