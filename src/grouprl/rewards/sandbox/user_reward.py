"""User reward files run inside the sandbox (``sandbox_user_rewards: true``).

The user's file is read here and executed in a fresh bubblewrap sandbox for every batch
of samples: no network, a read-only system, a private scratch dir. The function sees the
same arguments as in-process; its results come back as JSON. A sample whose run fails
(exception, timeout, memory) is reported as that sample's reward error.

The results are read only from a run that ended cleanly, and only after a marker holding a fresh
per-run secret: a completion is data, and if the reward prints it (a debug ``print``) and the run
is then killed, a results line the completion carries must not be taken for the reward's answer.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any, Callable

from grouprl.records import EvaluateResult
from grouprl.rewards.sandbox.bwrap import GROUPRL_MOUNT
from grouprl.rewards.kit import reward_function
from grouprl.rewards.sandbox.runner import run_in_sandbox

MARK = "__GROUPRL_RESULTS__"

_DRIVER = '''
import json, sys, types
sys.path.insert(0, {lib!r})  # the grouprl package, read-only (records, reward kit)
source, name, payload = {source!r}, {name!r}, json.loads({payload!r})
module = types.ModuleType("user_reward")
exec(compile(source, {filename!r}, "exec"), module.__dict__)
fn = getattr(module, name)
out = []
for sample in payload:
    try:
        if hasattr(fn, "reward_mode"):
            r = fn(sample["messages"], ground_truth=sample["ground_truth"], **sample["kwargs"])
            out.append({{"result": r.model_dump()}})
        else:
            completion = sample["messages"][-1]["content"]
            out.append({{"result": {{"score": fn(completion, sample["ground_truth"], **sample["kwargs"])}}}})
    except Exception as err:
        out.append({{"error": type(err).__name__ + ": " + str(err)}})
print("\\n" + {mark!r} + json.dumps(out))
'''


def refuse_unsandboxed(name: str, builtin_names) -> None:
    """With ``sandbox_user_rewards`` on, a reward that would be imported into the trainer is an error.

    Only ``path/to/file.py:function`` runs in the sandbox (its source is read and executed
    there). A ``.pyc``, ``.so``, any other file, or a ``package.module:function`` outside grouprl
    would be imported in-process, so it is refused (``KeyError`` naming the reward).
    """
    if name in builtin_names:
        return
    where = name.rpartition(":")[0]
    if not where:
        return  # not a user reward spec; the registry reports unknown names
    if where.endswith(".py") and Path(where).is_file():
        return
    if where.endswith(".py"):
        raise KeyError(f"reward '{name}': no such reward file '{where}' (found nothing; expected "
                       "'path/to/file.py:function')")
    if "/" not in where and not Path(where).exists() and where.split(".")[0] == "grouprl":
        return  # grouprl's own modules are part of the trainer already
    raise KeyError(f"reward '{name}': sandbox_user_rewards is on, but '{where}' is not a .py source file "
                   "and would be imported into the trainer unsandboxed (refused); expected "
                   "'path/to/file.py:function'")


def user_reward_in_sandbox(spec: str, timeout_s: float = 30.0, memory_mb: int = 1024) -> Callable:
    """A batch ``@reward_function`` that runs ``path/to/file.py:function`` in the sandbox."""
    where, _, name = spec.rpartition(":")
    path = Path(where)
    if not path.is_file():
        raise KeyError(f"reward '{spec}': no such reward file '{where}' (sandboxed rewards name 'path/to/file.py:function')")
    source = path.read_text()

    @reward_function(mode="batch", id=name)
    def run(rollouts_messages, ground_truths=None, **kwargs) -> list[EvaluateResult]:
        n = len(rollouts_messages)
        truths = ground_truths if ground_truths is not None else [None] * n
        payload = [{"messages": [m.model_dump(exclude_none=True) for m in msgs], "ground_truth": truths[i],
                    "kwargs": {k: _plain(v[i]) for k, v in kwargs.items()}}
                   for i, msgs in enumerate(rollouts_messages)]
        mark = f"{MARK}{secrets.token_hex(16)}:"
        code = _DRIVER.format(source=source, name=name, payload=json.dumps(payload), filename=str(path), mark=mark,
                              lib=GROUPRL_MOUNT)
        try:  # never the rlimits fallback: a user file is run isolated or not at all
            res = run_in_sandbox(code, timeout_s=timeout_s, cpu_s=int(timeout_s) + 1, memory_mb=memory_mb,
                                 backend="bwrap", expose_grouprl=True)
        except RuntimeError as err:
            return _errors(n, f"sandbox: {err}")
        if res.infra_error:
            return _errors(n, res.infra_error)
        if not res.ok or mark not in res.stdout:
            lines = res.stderr.strip().splitlines() or [f"no results (exit code {res.exit_code})"]
            why = res.killed_reason or lines[-1]
            return _errors(n, f"sandbox ({res.backend}): {why}")
        try:
            rows = json.loads(res.stdout.rsplit(mark, 1)[1].split("\n", 1)[0])
            if not isinstance(rows, list) or len(rows) != n:
                raise ValueError(f"{len(rows) if isinstance(rows, list) else 'no'} results for {n} samples")
            return [EvaluateResult.model_validate(r["result"]) if "result" in r
                    else EvaluateResult(score=0.0, is_score_valid=False, error=str(r["error"])) for r in rows]
        except (ValueError, RecursionError, TypeError, KeyError) as err:  # pydantic's ValidationError too
            return _errors(n, f"{spec}: unreadable results ({type(err).__name__}: {str(err)[:200]})")

    return run


def _errors(n: int, error: str) -> list[EvaluateResult]:
    return [EvaluateResult(score=0.0, is_score_valid=False, error=error) for _ in range(n)]


def _plain(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)
