"""The one plug-in Registry (src/grouprl/registry.py): eight tables, one lookup, one unknown-name error."""

from __future__ import annotations

import sys

import pytest

from grouprl.algos.advantages import ESTIMATORS, Estimator, get_estimator
from grouprl.algos.importance import sampling_correction
from grouprl.algos.policy_losses import get_loss
from grouprl.config import ConfigError
from grouprl.registry import Registry, UnknownName
from grouprl.rewards.registry import get_reward
from grouprl.rollout.generation import BACKENDS
from grouprl.run_config import build_config, plugin_registries
from grouprl.tasks.registry import task_spec
from grouprl.tools.parsers import get_parser
from grouprl.tools.registry import resolve_tool

KINDS = {"advantage estimator", "loss", "sampling correction", "reward", "tool", "parser", "task", "generation backend"}


def test_the_eight_plugin_tables_are_one_registry_class():
    tables = plugin_registries()
    assert len(tables) == 8 and all(type(t) is Registry for t in tables)
    assert {t.kind for t in tables} == KINDS
    # each module's lookup function is that table's one lookup, not a lookup of its own
    for lookup in (get_estimator, get_loss, sampling_correction, get_reward, get_parser, task_spec):
        assert lookup.__func__ is Registry.resolve and lookup.__self__ in tables


@pytest.fixture
def code(tmp_path, monkeypatch):
    """A user's file and a user's module (a real package on sys.path), each with one function."""
    (tmp_path / "mine.py").write_text("def triple(x):\n    return 3 * x\n")
    (tmp_path / "userpkg").mkdir()
    (tmp_path / "userpkg" / "__init__.py").write_text("")
    (tmp_path / "userpkg" / "fns.py").write_text("def half(x):\n    return x / 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("userpkg.fns", None)
    sys.modules.pop("userpkg", None)


def test_a_name_a_file_and_a_module_resolve_through_the_same_lookup(code):
    declared = []

    def declare(name, fn, scale=1):
        declared.append(name)
        return (fn, scale)

    table: Registry = Registry("thing", declare)
    table.register("double", scale=2)(lambda x: 2 * x)
    file_spec, module_spec = f"{code / 'mine.py'}:triple", "userpkg.fns:half"
    entries = {name: table.resolve(name) for name in ("double", file_spec, module_spec)}
    assert declared == ["double", file_spec, module_spec]  # every entry was declared the same way
    assert [fn(6) for fn, _ in entries.values()] == [12, 18, 3.0]
    assert entries["double"][1] == 2 and entries[file_spec][1] == 1
    assert "double" in table and file_spec not in table  # user code is resolved, never registered

    # the real tables take the same three forms
    (code / "est.py").write_text("def signs(scores, group_ids, *, margin=0.0):\n    return scores.sign()\n")
    estimator = get_estimator(f"{code / 'est.py'}:signs")
    assert isinstance(estimator, Estimator) and estimator.options == ("margin",)
    assert get_estimator("grpo") is ESTIMATORS["grpo"]
    assert get_reward("grouprl.rewards.builtin.number_answer:arithmetic_exact")("12", "12") == 1.0
    assert BACKENDS.resolve("grouprl.rollout.generation:_hf_backend") is BACKENDS["hf"]
    assert resolve_tool("grouprl.tools.builtin:lookup").fn("mile") == "1 mile = 5280 feet"


def test_user_code_is_imported_on_resolve_not_on_check(tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('imported')\n")
    spec = f"{tmp_path / 'broken.py'}:f"
    table: Registry = Registry("thing")
    table.check(spec)  # a config naming it is checked without running the user's module
    with pytest.raises(KeyError, match="thing '.*broken.py:f': importing .* RuntimeError: imported"):
        table.resolve(spec)
    task = task_spec(spec)  # a task from a file: imported when it is built
    with pytest.raises(ConfigError, match="RuntimeError: imported"):
        task.build(None)


@pytest.mark.parametrize("table", plugin_registries(), ids=lambda t: t.kind)
def test_an_unknown_name_is_one_line_with_the_kind_the_name_and_the_known_names(table):
    with pytest.raises(UnknownName) as err:
        table.resolve("no_such_name")
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"unknown {table.kind} 'no_such_name'; known: ")
    assert len(table) >= 3 and all(repr(name) in message for name in table)
    assert ("'path/to/file.py:" in message) == table.takes_code
    assert isinstance(err.value, KeyError) and isinstance(err.value, ValueError)  # callers catch either


def test_a_builtins_only_table_refuses_user_code(tmp_path):
    (tmp_path / "p.py").write_text("def parse(text):\n    return text\n")
    with pytest.raises(UnknownName, match="unknown parser '.*p.py:parse'; known: 'hermes'"):
        get_parser(f"{tmp_path / 'p.py'}:parse")
    with pytest.raises(ValueError, match="known: 'sequence_mask', 'sequence_truncate', 'token_mask'"):
        sampling_correction("sequence_magic")


@pytest.mark.parametrize("table", [t for t in plugin_registries() if t.config_key], ids=lambda t: t.kind)
def test_check_names_checks_every_table_a_config_key_names(table):
    def config_naming(*names):
        return {table.config_key: list(names) if table.config_key == "tools" else names[-1]}

    with pytest.raises(ConfigError) as err:
        build_config(None, config_naming(next(iter(table)), "no_such_name"), environ={})
    assert f"config key '{table.config_key}' (section " in str(err.value)
    assert f"unknown {table.kind} 'no_such_name'" in str(err.value)
    if table.takes_code:  # user code passes the check (it is imported where the part is built)
        build_config(None, config_naming("no_such_pkg.mod:fn"), environ={})
