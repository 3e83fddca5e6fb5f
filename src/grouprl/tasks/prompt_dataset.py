"""The ``prompt_dataset`` task: any prompt dataset (hub id, local dir, one file, or a mixture).

A row is the dataset row itself; every column reaches every reward function as a keyword
argument (TRL's contract), the solution column is also the ground truth of grouprl's typed
rewards. Which reward's 1.0 counts as "correct" (the accuracy metric, pass@k) is
``correct_reward`` (default: the first reward). See ``docs/data.md``.
"""

from __future__ import annotations

import functools
import logging
import string
from typing import Any

from grouprl.config import Config, ConfigError
from grouprl.config.task_sections import PromptDatasetConfig
from grouprl.data.mixture import MixtureError, hold_out, load_mixture
from grouprl.data.prompt_rows import BadRowsError, PromptSpec, prompt_messages, to_prompt_rows
from grouprl.data.sources import DatasetSourceError, load_split
from grouprl.tasks.base import SingleTurnEnv
from grouprl.tasks.interface import Task
from grouprl.tasks.registry import register_task

log = logging.getLogger(__name__)


SOLUTION_COLUMNS = ("solution", "answer", "ground_truth")


def _math_gold(value: Any) -> str | None:
    from grouprl.rewards.builtin.math_judge import gold_parses

    return None if gold_parses(value) else "math-verify finds no answer in it (math_accuracy could not use it)"


# A solution the correctness reward cannot use makes a bad row (counted, reported), not a silent 0.
SOLUTION_CHECKS = {"math_accuracy": _math_gold, "cosine_length": _math_gold}


class PromptDatasetTask(Task):
    """Single-turn rows from a prompt dataset; the task protocol of ``tasks/registry.py``."""

    name = "prompt_dataset"
    multi_step = False
    has_gold_completions = False  # no SFT warm start of a tiny model: RL starts from its init

    def __init__(
        self,
        train_rows,
        eval_rows,
        spec: PromptSpec,
        columns: list[str],
        reward_names: list[str],
        correct_reward: str | None,
    ):
        self.train_rows, self.eval_rows, self.spec, self.columns = train_rows, eval_rows, spec, columns
        self.system_prompt = spec.system_prompt
        self.reward_names = list(reward_names)
        self.reward_weights = [1.0] * len(reward_names)
        self.reward_kwargs: dict[str, dict[str, Any]] = {}
        self.correct_reward = correct_reward

    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        return prompt_messages(row[self.spec.prompt_column], self.spec.system_prompt)

    def env_factory(self, row: dict[str, Any]):
        return functools.partial(SingleTurnEnv, self.messages(row))

    def seed_of(self, row: dict[str, Any]) -> int | None:
        return None

    def tokenizer_corpus(self) -> str:
        """Printable ASCII (what rewards ask the model to write: tags, digits) plus every character
        of the prompts, the system prompt and the string columns."""
        chars = set(string.printable)
        for row in self.train_rows + self.eval_rows:
            for m in self.messages(row):
                chars |= set(m["content"])
            for value in row.values():
                if isinstance(value, str):
                    chars |= set(value)
        return "".join(sorted(chars))


def _solution_column(wanted: str | None, columns: list[str]) -> str | None:
    if wanted:
        return wanted
    return next((c for c in SOLUTION_COLUMNS if c in columns), None)


def _raw_splits(cfg: Config, d: PromptDatasetConfig):
    """(train, test or None, where) as datasets.Dataset objects."""
    task_cfg = cfg.task
    if d.dataset_mixture is not None:
        if task_cfg.dataset_name_or_path:
            raise ConfigError("config keys 'dataset_name_or_path' and 'dataset_mixture': give one, not both")
        if d.test_split_size:  # open-r1 reads it from the mixture only: silently ignoring it would lose the eval
            raise ConfigError(
                f"config key 'test_split_size' ({d.test_split_size}) has no effect with "
                "'dataset_mixture'; give it inside the mixture: dataset_mixture.test_split_size"
            )
        train, test = load_mixture(d.dataset_mixture)
        if test is None and d.dataset_test_split:
            log.warning(
                "dataset_test_split '%s' has no effect with dataset_mixture: its test split comes from "
                "dataset_mixture.test_split_size, which is not set (no held-out rows)",
                d.dataset_test_split,
            )
        return train, test, "dataset_mixture"
    if not task_cfg.dataset_name_or_path:
        raise ConfigError(
            "task 'prompt_dataset' needs 'dataset_name_or_path' (a hub id, a dir or a file) or 'dataset_mixture'"
        )
    # dataset_config's default ("main") is GSM8K's; a prompt dataset uses its own default unless one is named.
    source = task_cfg.dataset_name_or_path
    config = task_cfg.dataset_config if "dataset_config" in task_cfg.model_fields_set else None
    train = load_split(source, config, d.dataset_train_split)
    test = load_split(source, config, d.dataset_test_split) if d.dataset_test_split else None
    if d.test_split_size:
        if test is not None:
            raise ConfigError("config keys 'dataset_test_split' and 'test_split_size': give one, not both")
        train, test = hold_out(train, d.test_split_size, cfg.train.seed)
    return train, test, source


@register_task("prompt_dataset", max_new_tokens=256)
def build_prompt_dataset(cfg: Config) -> PromptDatasetTask:
    d: PromptDatasetConfig = cfg.data
    task_cfg = cfg.task
    if not task_cfg.rewards:
        raise ConfigError(
            "task 'prompt_dataset' needs 'rewards' (reward_funcs): names, 'file.py:function' or "
            "'package.module:function'"
        )
    try:
        train_raw, test_raw, where = _raw_splits(cfg, d)
        columns = list(train_raw.column_names)
        names = [r if isinstance(r, str) else r.name for r in task_cfg.rewards]
        check = next((SOLUTION_CHECKS[n] for n in [d.correct_reward or names[0]] + names if n in SOLUTION_CHECKS), None)
        spec = PromptSpec(
            d.dataset_prompt_column,
            _solution_column(d.dataset_solution_column, columns),
            task_cfg.system_prompt,
            d.max_bad_row_fraction,
            check,
        )
        train = to_prompt_rows(train_raw, spec, f"{where} ({d.dataset_train_split})")
        test = to_prompt_rows(test_raw, spec, f"{where} (test)") if test_raw is not None else None
    except (DatasetSourceError, MixtureError, BadRowsError, ValueError) as err:
        raise ConfigError(str(err)) from None
    rows = train.rows[: task_cfg.n_train] if task_cfg.n_train else train.rows
    correct = d.correct_reward or names[0]
    log.debug(
        "prompt_dataset %s: %d train rows, %d eval rows; columns %s (prompt %r, solution %r) reach every reward: %s",
        where,
        len(rows),
        len(test.rows) if test else 0,
        columns,
        spec.prompt_column,
        spec.solution_column,
        names,
    )
    return PromptDatasetTask(rows, test.rows if test else [], spec, columns, names, correct)
