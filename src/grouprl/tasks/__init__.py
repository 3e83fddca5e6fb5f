"""Where episodes come from."""

from __future__ import annotations

from grouprl.config import Config, ConfigError
from grouprl.tasks import arithmetic, gsm8k
from grouprl.tasks.base import SingleTurnEnv, SingleTurnTask
from grouprl.tasks.env_task import EnvTask, load_env_task

__all__ = ["EnvTask", "SingleTurnEnv", "SingleTurnTask", "load_task"]

Task = SingleTurnTask | EnvTask


def load_task(cfg: Config) -> Task:
    t = cfg.task
    if t.task in ("gridworld", "sokoban", "calculator"):
        def question_rows():
            source = cfg.model_copy(deep=True)
            source.task.task = t.calculator_questions
            q = _single_turn(source)
            return q.train_rows, q.eval_rows

        task = load_env_task(cfg, question_rows)
    else:
        task = _single_turn(cfg)
    return _with_rewards(cfg, task)


def _single_turn(cfg: Config) -> SingleTurnTask:
    t = cfg.task
    if t.task == "arithmetic":
        train, held_out = arithmetic.generate_rows(
            t.n_train or 6000, max(cfg.eval.n_eval, 1), t.arithmetic_digits, t.arithmetic_operands,
            t.arithmetic_operators, t.arithmetic_reverse_answer,
        )
        task = SingleTurnTask("arithmetic", train, held_out, t.system_prompt, ["arithmetic_digits"], "arithmetic_exact")
    else:
        train = gsm8k.load_split(t.dataset_name_or_path, "train", t.dataset_config)
        held_out = gsm8k.load_split(t.dataset_name_or_path, "test", t.dataset_config)
        if t.n_train:
            train = train[: t.n_train]
        system = gsm8k.SYSTEM_PROMPT if t.system_prompt is None else t.system_prompt
        task = SingleTurnTask("gsm8k", train, held_out, system, ["gsm8k_final"], "gsm8k_final")
    return task


def _with_rewards(cfg: Config, task: Task) -> Task:
    """Recipe reward specs replace the task's default rewards (environments default to none)."""
    t = cfg.task
    spec_weights: list[float] = []
    if t.rewards:
        task.reward_names, task.reward_options = [], {}
        for spec in t.rewards:
            name = spec if isinstance(spec, str) else spec.name
            task.reward_names.append(name)
            spec_weights.append(1.0 if isinstance(spec, str) else spec.weight)
            if not isinstance(spec, str) and spec.options:
                task.reward_options[name] = dict(spec.options)
    weights = t.reward_weights or spec_weights or [1.0] * len(task.reward_names)
    if len(weights) != len(task.reward_names):
        raise ConfigError(
            f"config key 'reward_weights': got {len(weights)} weights for rewards {task.reward_names}; expected one each"
        )
    task.reward_weights = list(weights)
    return task
