"""What an agent's failure says, and the first failure of each kind printed once per run.

An agent that cannot run fails every episode the same way; counted in ``agent/failed/<kind>`` alone it
would go unseen. So the runner (``runner.py``) turns what went wrong into one line (the agent's exception,
or the endpoint's error and the parameter it names when the agent raised on a refused request) and keeps
the agent's traceback (its own frames: the runner's, asyncio's and the ``openai`` client's are dropped),
and :func:`report_first_failures` logs the first failure of each kind, and the first refusal of each
error code, as a warning: once per ``reported`` set, which the run's agent settings hold.
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import Any

from grouprl.records import Episode

log = logging.getLogger(__name__)

FAILURES = ("agent_raised", "timeout", "max_calls", "no_calls", "invalid_reward")
MESSAGE_CHARS = 300  # the one-line message kept on the episode's record
TRACE_FRAMES, TRACE_CHARS = 12, 3000  # the agent's traceback as printed: its last frames, at most this long
_NOT_THE_AGENT = ("site-packages", "dist-packages", "/asyncio/", str(Path(__file__).parent))


def raised_message(err: BaseException) -> str:
    """The agent's exception in one line; a refused request as the endpoint's error code, parameter and
    message (``openai.APIStatusError`` carries them)."""
    code, param, status = getattr(err, "code", None), getattr(err, "param", None), getattr(err, "status_code", None)
    if code and status is not None:  # the openai client raised the endpoint's OpenAI-style error
        where = f" (parameter '{param}')" if param else ""
        text = f"the endpoint refused a request: {code}{where}: {getattr(err, 'message', err)}"
    else:
        text = f"{type(err).__name__}: {err}"
    return " ".join(text.split())[:MESSAGE_CHARS]


def agent_traceback(err: BaseException) -> str:
    """The traceback of the agent's own code (its last frames), then the exception."""
    frames = traceback.extract_tb(err.__traceback__)
    own = [f for f in frames if not any(part in f.filename for part in _NOT_THE_AGENT)] or list(frames)
    lines = traceback.format_list(own[-TRACE_FRAMES:]) + traceback.format_exception_only(type(err), err)
    text = "".join(lines).rstrip()
    return text if len(text) <= TRACE_CHARS else "..." + text[-TRACE_CHARS:]


def _refusals(refused: dict[str, int]) -> str:
    return ", ".join(f"{code} x{n}" for code, n in sorted(refused.items()))


def report_first_failures(episodes: list[Episode], traces: list[str], reported: set[str]) -> list[str]:
    """Log (warning) the first failure of each kind and the first refusal of each error code not yet in
    ``reported``, and add them to it. ``traces[i]``: episode i's agent traceback ('' when it did not raise).
    Returns the lines logged."""
    logged: list[str] = []
    for ep, trace in zip(episodes, traces):
        run = ep.agent
        if run is None:
            continue
        refused = _refusals(run.refused)
        if run.failure is not None and run.failure not in reported:
            reported.add(run.failure)
            reported.update(f"refused:{code}" for code in run.refused)
            text = (
                f"an agent episode failed ({run.failure}): {run.message}"
                + (f"; the endpoint refused: {refused}" if refused else "")
                + f". Printed once; every such episode is counted in agent/failed/{run.failure}"
                + (f". The agent's traceback:\n{_indent(trace)}" if trace else "")
            )
            log.warning("%s", text)
            logged.append(text)
        fresh = sorted(code for code in run.refused if f"refused:{code}" not in reported)
        if fresh:
            reported.update(f"refused:{code}" for code in fresh)
            text = (
                f"the endpoint refused an agent's request: {', '.join(fresh)} (this episode: {refused}); the agent "
                f"was answered with the error naming the parameter. Printed once; counted in agent/refused/<code>"
            )
            log.warning("%s", text)
            logged.append(text)
    return logged


def failure_summary(runs: list[Any]) -> str:
    """The failures of a batch in one line: kinds by count, then the most common kind's first message."""
    kinds: dict[str, int] = {}
    for run in runs:
        if run is not None and run.failure is not None:
            kinds[run.failure] = kinds.get(run.failure, 0) + 1
    if not kinds:
        return "no failed episode"
    top = max(kinds, key=lambda k: kinds[k])
    first = next(r for r in runs if r is not None and r.failure == top)
    refused = _refusals(first.refused)
    counts = ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items()))
    return f"{counts}; {top}: {first.message}" + (f" (refused: {refused})" if refused else "")


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
