"""User reward files run inside the sandbox (``sandbox_user_rewards: true``).

The user's file is read here and executed in a fresh bubblewrap sandbox for every batch
of samples (``programs/user_reward.py``): no network, a read-only system, a private scratch dir.
The function sees the same arguments as in-process; its results come back as JSON. Each sample
has its own time budget (``reward_timeout``), so a slow sample is that sample's error and a batch
of 32 legitimate 1-second samples finishes. A sample whose run fails (exception, timeout) is that
sample's reward error; a file with a syntax error, or whose import fails or exits, is refused when
the scorer is built, before any model loads.

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
from grouprl.user_code import CodeRef, code_ref

MARK = "__GROUPRL_RESULTS__"
DRIVER = (Path(__file__).with_name("programs") / "user_reward.py").read_text(encoding="utf-8")
DEFAULT_SAMPLE_TIMEOUT_S = 30.0  # per sample, when the run sets no reward_timeout
STARTUP_S = 15.0  # the sandbox, the interpreter and the user's imports, once per batch


def refuse_unsandboxed(name: str, builtin_names) -> None:
    """With ``sandbox_user_rewards`` on, a reward that would be imported into the trainer is an error.

    Only ``path/to/file.py:function`` runs in the sandbox (its source is read and executed
    there). A ``.pyc``, ``.so``, any other file, or a ``package.module:function`` outside grouprl
    would be imported in-process, so it is refused (``KeyError`` naming the reward).
    """
    ref = code_ref(name)
    if name in builtin_names or ref is None:
        return  # a built-in, or not a user reward spec (the registry reports unknown names)
    where = ref.where
    if ref.is_source and Path(where).is_file():
        return
    if ref.is_source:
        raise KeyError(
            f"reward '{name}': no such reward file '{where}' (found nothing; expected 'path/to/file.py:function')"
        )
    if "/" not in where and not Path(where).exists() and where.split(".")[0] == "grouprl":
        return  # grouprl's own modules are part of the trainer already
    raise KeyError(
        f"reward '{name}': sandbox_user_rewards is on, but '{where}' is not a .py source file "
        "and would be imported into the trainer unsandboxed (refused); expected "
        "'path/to/file.py:function'"
    )


def _sandboxed_run(
    source: str, path: Path, name: str, samples: list, sample_timeout: float, memory_mb: int, check_only: bool = False
):
    """One sandbox run of the driver: (results line or None, the run's result)."""
    mark = f"{MARK}{secrets.token_hex(16)}:"
    params = {
        "lib": GROUPRL_MOUNT,
        "source": source,
        "filename": str(path),
        "name": name,
        "mark": mark,
        "sample_timeout": sample_timeout,
        "check_only": check_only,
    }
    wall = STARTUP_S + sample_timeout * max(len(samples), 1)
    # never the rlimits fallback: a user file is run isolated or not at all
    res = run_in_sandbox(
        DRIVER,
        stdin=json.dumps(params) + "\n" + json.dumps(samples) + "\n",
        timeout_s=wall,
        cpu_s=int(wall) + 1,
        memory_mb=memory_mb,
        backend="bwrap",
        expose_grouprl=True,
    )
    if res.infra_error or not res.ok or mark not in res.stdout:
        return None, res
    return res.stdout.rsplit(mark, 1)[1].split("\n", 1)[0], res


def _check_file(spec: str, path: Path, source: str, name: str, memory_mb: int) -> None:
    """Refuse a file that cannot be a reward before anything else runs: a syntax error (compiled
    here, never executed), or an import that fails or exits in the sandbox, or no such function."""
    try:
        compile(source, str(path), "exec")
    except SyntaxError as err:
        line = f" line {err.lineno}" if err.lineno else ""
        raise KeyError(f"reward '{spec}': {path}{line}: {type(err).__name__}: {err.msg}") from None
    except ValueError as err:  # e.g. a null byte in the source
        raise KeyError(f"reward '{spec}': {path}: ValueError: {err}") from None
    try:
        line, res = _sandboxed_run(source, path, name, [], DEFAULT_SAMPLE_TIMEOUT_S, memory_mb, check_only=True)
    except RuntimeError as err:
        raise KeyError(f"reward '{spec}': sandbox_user_rewards is on but the sandbox cannot run it: {err}") from None
    found = json.loads(line) if line else {}
    if "load_error" in found:
        raise KeyError(f"reward '{spec}': importing {path} in the sandbox failed: {found['load_error']}")
    if not found.get("ok"):
        why = res.infra_error or res.killed_reason or (res.stderr.strip().splitlines() or [f"exit {res.exit_code}"])[-1]
        raise KeyError(f"reward '{spec}': importing {path} in the sandbox failed: {why}")
    if found.get("learned_reward"):
        raise KeyError(
            f"reward '{spec}': a @learned_reward cannot run under sandbox_user_rewards: true (it keeps and "
            "trains state in the trainer's process, which the sandbox never imports a reward file into); "
            "turn sandbox_user_rewards off to use it"
        )


def user_reward_in_sandbox(spec: str, memory_mb: int = 1024) -> Callable:
    """A batch ``@reward_function`` that runs ``path/to/file.py:function`` in the sandbox, each sample
    with its own time budget (the scorer passes ``reward_timeout`` as ``sample_timeout``). The file is
    checked here, before any model loads (``KeyError`` naming the file and line)."""
    ref = code_ref(spec) or CodeRef("", spec)
    where, name = ref.where, ref.function
    path = Path(where)
    if not path.is_file():
        raise KeyError(
            f"reward '{spec}': no such reward file '{where}' (sandboxed rewards name 'path/to/file.py:function')"
        )
    source = path.read_text()
    _check_file(spec, path, source, name, memory_mb)

    @reward_function(mode="batch", id=name, budget="per_sample")
    def run(
        rollouts_messages, ground_truths=None, sample_timeout: float | None = None, **kwargs
    ) -> list[EvaluateResult]:
        n = len(rollouts_messages)
        truths = ground_truths if ground_truths is not None else [None] * n
        payload = [
            {
                "messages": [m.model_dump(exclude_none=True) for m in msgs],
                "ground_truth": truths[i],
                "kwargs": {k: _plain(v[i]) for k, v in kwargs.items()},
            }
            for i, msgs in enumerate(rollouts_messages)
        ]
        budget = float(sample_timeout) if sample_timeout else DEFAULT_SAMPLE_TIMEOUT_S
        try:
            line, res = _sandboxed_run(source, path, name, payload, budget, memory_mb)
        except RuntimeError as err:
            return _errors(n, f"sandbox: {err}")
        if res.infra_error:
            return _errors(n, res.infra_error)
        if line is None:
            lines = res.stderr.strip().splitlines() or [f"no results (exit code {res.exit_code})"]
            why = res.killed_reason or lines[-1]
            return _errors(n, f"sandbox ({res.backend}): {why}")
        try:
            rows = json.loads(line)
            if isinstance(rows, dict) and "load_error" in rows:
                return _errors(n, f"{spec}: {rows['load_error']}")
            if not isinstance(rows, list) or len(rows) != n:
                raise ValueError(f"{len(rows) if isinstance(rows, list) else 'no'} results for {n} samples")
            return [
                EvaluateResult.model_validate(r["result"])
                if "result" in r
                else EvaluateResult(score=0.0, is_score_valid=False, error=str(r["error"]))
                for r in rows
            ]
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
