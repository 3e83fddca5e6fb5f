"""Why each call of an agent's episode was merged into an earlier one, split from it, or forked: the drift check.

A call is *merged* when its prompt was grown token for token from an earlier call's prompt and completion (the
agent handed back the chat it was answered with, and the template renders it append-only): both train as one
sample. Otherwise it is *split*: a new sample starts, and the reason is the first rule of ``calls.render_call``
that failed against the earlier call whose messages it shares the longest prefix with -- the tools changed, the
earlier turn was truncated or cut (a stop string, dropped parallel calls), the agent rewrote its history
(compaction, a summary, an edited message), it handed back another assistant message than the one it got (a
re-rendered tool call, stripped whitespace), or the template re-renders earlier turns (a Qwen3-style template
that drops earlier ``<think>`` blocks). A call is *forked* when it grows from a call that an earlier call of the
episode already grew from (``n`` > 1, a sub-agent, a retry): each branch is its own sample.

``first_difference`` names the first token where the call's prompt leaves what the earlier call would have grown
into: where the drift is, in the model's own tokens. Nothing here changes what trains; it reads the records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grouprl.rollout.agent.calls import CallRecord, same_reply


@dataclass
class CallVerdict:
    index: int
    verdict: str  # "first", "merged", "split" or "forked"
    reason: str
    first_difference: str  # "" for a merged or first call
    params: dict[str, str]


def explain_calls(tokenizer, calls: list[CallRecord]) -> list[CallVerdict]:
    """One verdict per call of one episode, in the order they were served."""
    out, grown_from = [], set()
    for i, call in enumerate(calls):
        earlier = _closest(calls[:i], call.messages)
        if earlier is None:
            out.append(CallVerdict(i, "first", "the episode's first call", "", call.params))
            continue
        j, parent = earlier
        if call.extends:
            verdict = "forked" if j in grown_from else "merged"
            reason = f"grows from call {j}" + (" (which an earlier call already grew from)" if j in grown_from else "")
            grown_from.add(j)
            out.append(CallVerdict(i, verdict, reason, "", call.params))
            continue
        reason = f"against call {j}: {_why_split(parent, call)}"
        out.append(CallVerdict(i, "split", reason, _first_difference(tokenizer, parent, call), call.params))
    return out


def _closest(earlier: list[CallRecord], messages: list[dict[str, Any]]) -> tuple[int, CallRecord] | None:
    """The earlier call this one could grow from: one whose whole history ``messages`` starts with (the longest,
    as ``render_call`` picks), else the one sharing the longest prefix; the latest among equals."""
    best: tuple[tuple[bool, int], int, CallRecord] | None = None
    for j, call in enumerate(earlier):
        shared = 0
        for a, b in zip(call.messages, messages):
            if a != b:
                break
            shared += 1
        key = (shared == len(call.messages) and len(messages) > shared, shared)
        if best is None or key >= best[0]:
            best = (key, j, call)
    return None if best is None else (best[1], best[2])


def _why_split(parent: CallRecord, call: CallRecord) -> str:
    n = len(parent.messages)
    if call.tools != parent.tools:
        return "the request's tools changed"
    if parent.completion.truncated:
        return "the earlier turn was truncated at the token cap"
    if parent.cut:
        return f"the earlier answer held less than its generated tokens ({parent.cut})"
    if len(call.messages) <= n or call.messages[:n] != parent.messages:
        k = next(
            (k for k, (a, b) in enumerate(zip(parent.messages, call.messages)) if a != b), min(n, len(call.messages))
        )
        return f"history rewritten from message {k} (compaction, a summary or an edited message)"
    if not same_reply(call.messages[n], parent.reply):
        return (
            f"history rewritten at message {n}: the agent handed back another assistant message than it was "
            "answered with (a compacted or edited reply, a re-rendered tool call)"
        )
    return "the chat template re-renders earlier turns (e.g. drops earlier <think> blocks)"


def _first_difference(tokenizer, parent: CallRecord, call: CallRecord) -> str:
    """The first token where ``call``'s prompt leaves the earlier call's prompt + completion."""
    grown = list(parent.prompt_ids) + list(parent.completion.ids)
    k = next(
        (k for k, (a, b) in enumerate(zip(grown, call.prompt_ids)) if a != b), min(len(grown), len(call.prompt_ids))
    )
    if k == len(grown):
        return f"token {k}: none (the prompt extends the earlier call's tokens, but was rendered afresh)"
    mine = tokenizer.decode(call.prompt_ids[k : k + 8]) if k < len(call.prompt_ids) else "<end>"
    theirs = tokenizer.decode(grown[k : k + 8])
    return f"token {k}: {mine!r} where the earlier call had {theirs!r}"


def report_lines(episode_id: str, verdicts: list[CallVerdict]) -> list[str]:
    """The check's printout for one episode."""
    lines = [f"episode {episode_id}: {len(verdicts)} call(s)"]
    for v in verdicts:
        lines.append(f"  call {v.index}: {v.verdict} -- {v.reason}")
        if v.first_difference:
            lines.append(f"    first differing token: {v.first_difference}")
        if v.params:
            lines.append("    sent: " + ", ".join(f"{k}={val}" for k, val in v.params.items()))
    return lines
