"""The task and environment interface (tasks/interface.py): default hooks instead of probes, and a
task or an environment named from a file in a recipe, with no change to the package."""

from __future__ import annotations

import random
import textwrap

import pytest

from grouprl.config import ConfigError
from grouprl.run_config import build_config
from grouprl.tasks import load_task
from grouprl.tasks.base import SingleTurnEnv, SingleTurnTask
from grouprl.tasks.env_task import EnvTask, play
from grouprl.tasks.envs.gridworld import GridWorld
from grouprl.tasks.interface import Environment, Task
from grouprl.tasks.tool_arithmetic import ToolArithmeticTask, expert_reply, rows

# A one-dimensional corridor: walk right from 0 to 3. Its expert always says "right".
CORRIDOR = textwrap.dedent("""
    from grouprl.records import Observation, StepResult
    from grouprl.tasks.interface import Environment


    class Corridor(Environment):
        instructions = "Walk right to the door."

        def reset(self, seed=None):
            self.at = 0
            return Observation(text="at 0", anchor_state="0", admissible_actions=["left", "right"])

        def step(self, action):
            self.at = max(0, self.at + (1 if action == "right" else -1))
            done = self.at == 3
            return StepResult(Observation(text=f"at {self.at}", anchor_state=str(self.at),
                                          admissible_actions=["left", "right"]), float(done), done)

        def expert_action(self):
            return "right"


    def make_env():
        return Corridor()


    def not_an_env():
        return object()
""")

COUNTING = textwrap.dedent("""
    from grouprl.tasks.base import SingleTurnTask


    def make_task(cfg):
        rows = [{"question": f"{i}+1", "ground_truth": str(i + 1), "gold_completion": str(i + 1)} for i in range(5)]
        return SingleTurnTask("counting", rows[:4], rows[4:], None, ["arithmetic_exact"], "arithmetic_exact")


    def make_dict(cfg):
        return {"rows": []}
""")


def test_hooks_have_defaults_on_every_built_in_task_and_environment():
    task = SingleTurnTask("t", [], [], None, [], "r")
    assert isinstance(task, Task) and task.eval_metrics([]) == {} and task.scorer_extras(None) == {}
    assert (task.tiny_tokenizer, task.has_gold_completions, task.seed_of({})) == ("char", True, None)
    assert isinstance(SingleTurnEnv([{"role": "user", "content": "q"}]), Environment)
    assert SingleTurnEnv([{"role": "user", "content": "q"}]).expert_action() is None  # the default
    grid = GridWorld(size=4)
    grid.reset(1)
    assert (
        isinstance(grid, Environment) and grid.instructions and grid.expert_action() in {"up", "down", "left", "right"}
    )


def test_a_task_without_a_parser_or_a_solver_says_so_and_the_tool_warm_start_refuses_it():
    task = SingleTurnTask("t", [], [], None, [], "r")
    assert task.predict is None and task.expert_reply is None
    with pytest.raises(NotImplementedError, match="SingleTurnTask.sft_rows"):
        task.sft_rows(2)
    from grouprl.job.tool_sft import expert_traces

    with pytest.raises(ConfigError, match="task 't' has none .*sft_steps: 0"):
        expert_traces(task, None, None, 2)
    tool_task = ToolArithmeticTask("tool_arithmetic", rows(2), rows(2, 1000))
    assert tool_task.expert_reply is expert_reply and len(tool_task.sft_rows(3)) == 3


def test_an_environment_without_its_own_hooks_gets_the_defaults():
    class Bare(Environment):
        pass

    env = Bare()
    assert env.instructions == "" and env.expert_action() is None
    with pytest.raises(NotImplementedError, match="Bare.reset"):
        env.reset(0)


def test_env_from_a_file_is_played_on_seeded_levels(tmp_path):
    (tmp_path / "corridor.py").write_text(CORRIDOR)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"task:\n  env: {tmp_path / 'corridor.py'}:make_env\n  n_train: 6\neval:\n  n_eval: 2\n")
    cfg = build_config(recipe, environ={})
    assert cfg.task.task == "env" and cfg.rollout.max_new_tokens == 24  # the env task's cap
    task = load_task(cfg)
    assert isinstance(task, EnvTask) and task.multi_step and len(task.train_rows) == 6 and len(task.eval_rows) == 2
    assert task.system_prompt == "Walk right to the door."
    steps = list(play(task, task.train_rows[0], "expert", random.Random(0), max_steps=10))
    assert [action for _, _, action, _ in steps] == ["right"] * 3 and steps[-1][3].done and steps[-1][3].reward == 1.0


def test_env_from_a_file_errors_name_the_file_and_what_was_found(tmp_path):
    (tmp_path / "corridor.py").write_text(CORRIDOR)
    with pytest.raises(
        ConfigError, match=r"make_env\(\) returned object; expected a grouprl.tasks.interface.Environment"
    ):
        load_task(build_config(None, {"env": f"{tmp_path / 'corridor.py'}:not_an_env"}, environ={}))
    with pytest.raises(ConfigError, match=r"env '.*missing.py:make_env': no such file"):
        load_task(build_config(None, {"env": f"{tmp_path / 'missing.py'}:make_env"}, environ={}))
    with pytest.raises(ConfigError, match="config keys 'task' and 'env': got task 'gsm8k'"):
        build_config(None, {"task": "gsm8k", "env": f"{tmp_path / 'corridor.py'}:make_env"}, environ={})


def test_task_from_a_file(tmp_path):
    (tmp_path / "counting.py").write_text(COUNTING)
    cfg = build_config(None, {"task": f"{tmp_path / 'counting.py'}:make_task"}, environ={})
    assert cfg.rollout.max_new_tokens == 256  # a task from a file: the default cap unless given
    task = load_task(cfg)
    assert task.name == "counting" and len(task.train_rows) == 4 and task.reward_names == ["arithmetic_exact"]
    with pytest.raises(ConfigError, match=r"make_task\(cfg\) returned dict; expected a grouprl.tasks.interface.Task"):
        load_task(build_config(None, {"task": f"{tmp_path / 'counting.py'}:make_dict"}, environ={}))
    with pytest.raises(
        ConfigError, match="config key 'task' \\(section task\\): unknown task 'no_such_task'; known: 'arithmetic'"
    ):
        build_config(None, {"task": "no_such_task"}, environ={})
