"""``grouprl view trajectories FILE [--episode ID]``: a trajectories JSONL as readable tables."""

from __future__ import annotations

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
            raise ValueError(f"{path}: record {i + 1} is not a trajectory step (needs 'episode' and 't'; "
                             f"has {sorted(row)[:8]})")
        episodes.setdefault(row["episode"], []).append(row)
    return episodes


def episodes_table(episodes: "OrderedDict[str, list[dict]]", title: str) -> Table:
    table = Table(title=title)
    for col in ["episode", "group", "seed", "steps", "invalid", "score", "success", "A_E"]:
        table.add_column(col, justify="right" if col not in ("episode",) else "left")
    for eid, steps in episodes.items():
        first = steps[0]
        table.add_row(eid, str(first["group"]), str(first.get("seed")), str(len(steps)),
                      str(sum(not s["valid"] for s in steps)), f"{first['episode_score']:+.3f}",
                      "yes" if first.get("success") else "no", f"{first['episode_advantage']:+.3f}")
    return table


def steps_table(eid: str, steps: list[dict]) -> Table:
    first = steps[0]
    table = Table(title=f"episode {eid} (group {first['group']}, seed {first.get('seed')}, "
                        f"score {first['episode_score']:+.3f}, success {bool(first.get('success'))})",
                  show_lines=True)
    for col in ["t", "observation", "action", "valid", "env r", "r_t", "R_t", "A_E", "A_S", "A", "anchor (size)"]:
        table.add_column(col, justify="left" if col in ("observation", "action") else "right")
    for s in steps:
        table.add_row(str(s["t"]), s["observation"], s["action"], "yes" if s["valid"] else "[red]no[/red]",
                      f"{s['env_reward']:+.2f}", f"{s['base_reward']:+.2f}", f"{s['return']:+.3f}",
                      f"{s['episode_advantage']:+.3f}", f"{s['step_advantage']:+.3f}", f"{s['advantage']:+.3f}",
                      f"{s['anchor_group']} ({s['anchor_group_size']})")
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
    console.print(steps_table(episode, episodes[episode]))
    return 0
