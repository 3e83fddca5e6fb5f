"""What a step's conversation episodes did with their tools (metrics.jsonl keys under ``tools/``).

- ``tools/calls_per_episode``: attempted calls (malformed ones included);
- ``tools/calls_tagged`` and ``tools/calls_bare_json``: well-formed calls per episode read in the
  parser's own format and, with ``tool_parser: hermes_lenient``, from bare untagged JSON (``ToolCall.form``);
- ``tools/invalid_call_rate``: calls that were the model's mistake (malformed, unknown tool, wrong
  arguments) over attempted calls;
- ``tools/error_rate`` and ``tools/errors/<kind>``: calls the tool itself failed (raised, timeout,
  sandbox) over attempted calls, and the count of each kind;
- ``tools/stalled_calls``: in-process calls that overran their timeout and are still running (their
  threads are abandoned, ``tools/execution.py``);
- ``tools/ended/<reason>``: the share of episodes that ended on an answer, ``max_tool_calls``, the
  context cap or a turn cut at ``max_new_tokens``.
"""

from __future__ import annotations

from collections import Counter

from grouprl.records import Episode
from grouprl.tools.execution import ERROR_KINDS, INVALID_KINDS, stalled_calls


def tool_metrics(episodes: list[Episode]) -> dict[str, float]:
    conversations = [ep for ep in episodes if ep.conversation]
    if not conversations:
        return {}
    kinds = Counter(r.get("error") for ep in conversations for s in ep.steps for r in (s.tool_results or []))
    calls = sum(kinds.values())
    per_call = max(calls, 1)
    n = len(conversations)
    metrics = {
        "tools/calls_per_episode": calls / n,
        "tools/invalid_call_rate": sum(kinds[k] for k in INVALID_KINDS) / per_call,
        "tools/error_rate": sum(kinds[k] for k in ERROR_KINDS if k not in INVALID_KINDS) / per_call,
        "tools/stalled_calls": float(stalled_calls()),
    }
    forms = Counter(c.get("form", "tagged") for ep in conversations for s in ep.steps for c in (s.tool_calls or []))
    metrics.update({"tools/calls_tagged": forms["tagged"] / n, "tools/calls_bare_json": forms["bare_json"] / n})
    metrics.update({f"tools/errors/{k}": float(kinds[k]) for k in ERROR_KINDS})
    ends = Counter(ep.end_reason for ep in conversations)
    metrics.update({f"tools/ended/{r}": ends[r] / n for r in ("answer", "max_tool_calls", "context", "truncated")})
    return metrics
