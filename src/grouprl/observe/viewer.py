"""``grouprl view trajectories FILE [--episode ID]``: a trajectories JSONL as readable tables."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from grouprl.observe.jsonl import read_jsonl


def load_episodes(path: str | Path) -> "OrderedDict[str, list[dict]]":
    rows = read_jsonl(path)
    if not rows:
        raise ValueError(f"{path}: no trajectory records")
    episodes: OrderedDict[str, list[dict]] = OrderedDict()
    for i, row in enumerate(rows):
        if "episode" not in row or "t" not in row:
            raise ValueError(
                f"{path}: record {i + 1} is not a trajectory step (needs 'episode' and 't'; has {sorted(row)[:8]})"
            )
        episodes.setdefault(row["episode"], []).append(row)
    return episodes


def episodes_table(episodes: "OrderedDict[str, list[dict]]", title: str) -> Table:
    table = Table(title=title)
    for col in ["episode", "group", "seed", "steps", "invalid", "score", "success", "A_E"]:
        table.add_column(col, justify="right" if col not in ("episode",) else "left")
    for eid, steps in episodes.items():
        first = steps[0]
        table.add_row(
            eid,
            str(first["group"]),
            str(first.get("seed")),
            str(len(steps)),
            str(sum(not s["valid"] for s in steps)),
            f"{first['episode_score']:+.3f}",
            "yes" if first.get("success") else "no",
            f"{first['episode_advantage']:+.3f}",
        )
    return table


def steps_table(eid: str, steps: list[dict]) -> Table:
    first = steps[0]
    table = Table(
        title=f"episode {eid} (group {first['group']}, seed {first.get('seed')}, "
        f"score {first['episode_score']:+.3f}, success {bool(first.get('success'))})",
        show_lines=True,
    )
    for col in ["t", "observation", "action", "valid", "env r", "r_t", "R_t", "A_E", "A_S", "A", "anchor (size)"]:
        table.add_column(col, justify="left" if col in ("observation", "action") else "right")
    for s in steps:
        table.add_row(
            str(s["t"]),
            s["observation"],
            s["action"],
            "yes" if s["valid"] else "[red]no[/red]",
            f"{s['env_reward']:+.2f}",
            f"{s['base_reward']:+.2f}",
            f"{s['return']:+.3f}",
            f"{s['episode_advantage']:+.3f}",
            f"{s['step_advantage']:+.3f}",
            f"{s['advantage']:+.3f}",
            f"{s['anchor_group']} ({s['anchor_group_size']})",
        )
    return table


def conversation_table(eid: str, steps: list[dict]) -> Table:
    """A conversation episode turn by turn: what the model generated (trained), the call the parser read,
    what the tool answered (masked: read, not trained), the turn's reward and advantages."""
    first = steps[0]
    table = Table(
        title=f"conversation {eid} (group {first['group']}, score {first['episode_score']:+.3f}, "
        f"success {bool(first.get('success'))}, ended: {first.get('end_reason') or '?'}; "
        f"prompt {first.get('masked_prompt_tokens', 0)} tokens masked)",
        show_lines=True,
    )
    for col in [
        "t",
        "assistant (trained)",
        "tool call",
        "tool result (masked)",
        "r_t",
        "A_E",
        "A_S",
        "A",
        "anchor state (size)",
    ]:
        table.add_column(col, justify="right" if col in ("t", "r_t", "A_E", "A_S", "A") else "left")
    for s in steps:
        calls = "\n".join(f"{c['name']}({json.dumps(c['arguments'])})" for c in s.get("tool_calls") or []) or "-"
        results = "\n".join(
            ("[red]" + r["error"] + "[/red] " if r.get("error") else "") + r["content"]
            for r in s.get("tool_results") or []
        )
        masked = s.get("masked_tokens_after", 0)
        table.add_row(
            str(s["t"]),
            f"{s['action']}\n[dim]({s.get('generated_tokens', '?')} tokens)[/dim]",
            calls,
            (results + f"\n[dim]({masked} tokens)[/dim]") if results else "-",
            f"{s['base_reward']:+.2f}",
            f"{s['episode_advantage']:+.3f}",
            f"{s['step_advantage']:+.3f}",
            f"{s['advantage']:+.3f}",
            f"{s.get('anchor_state', '')} ({s['anchor_group_size']})",
        )
    return table


def view_trajectories(path: str | Path, episode: str | None = None, console: Console | None = None) -> int:
    console = console or Console()
    episodes = load_episodes(path)
    if episode is None:
        console.print(episodes_table(episodes, f"{path}: {len(episodes)} episodes"))
        console.print("show one with --episode ID")
        return 0
    if episode not in episodes:
        known = ", ".join(list(episodes)[:10])
        raise KeyError(f"{path}: no episode {episode!r}; episodes are e.g. {known}")
    steps = episodes[episode]
    console.print(conversation_table(episode, steps) if "tool_results" in steps[0] else steps_table(episode, steps))
    return 0
