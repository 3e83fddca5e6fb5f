"""Seeded synthetic slate rows in the hub schema, with a hidden rule a model can learn.

The world: per issue, channels with a slant (+1 argues for the policy — stricter gun laws, a
higher minimum wage —, -1 against, 0 neutral) and videos on them. Each row is one viewer's
session: a few watched videos, the current one, a slate of 3-5 unwatched options and the click.

The click rule (applied with probability 1 - noise; otherwise a uniformly random option):
  1. an option from the channel playing now (viewers stay on a channel), else
  2. among options whose slant agrees with the viewer's initial viewpoint, the most viewed, else
  3. the most viewed option.
The opinion index moves with what was watched: after = before + 0.04 * (sum of the slants of the
history, the current and the clicked video), clipped to [0, 1]; with probability
``opinion_noise`` the step is replaced by a random one of -0.04, 0, +0.04.

Everything the rule needs is in the prompt (stance line, channel names, view counts, history),
so a perfect reader's click accuracy is (1 - noise) + noise / n_options; :func:`ceiling`
measures that reader (and the opinion reader that predicts the click first) on the rows.

The world (channels, videos, viewers and the rule) is ``synthetic_world.py``; this module draws the
rows from it, reads them back with the rule and writes the datasets.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from grouprl.tasks.slates.synthetic_world import Video, catalog, channel_slants, make_viewer, rule_choice, stance_of

STUDY = {"gun_control": "study1", "minimum_wage": "study2"}
ISSUE_DIRS = {"gun_control": "gun", "minimum_wage": "wage"}
STEP = 0.04


def _detail(video: Video, rng: random.Random, use_ms: bool) -> dict[str, Any]:
    watched = rng.randint(5, video.duration)
    if use_ms:
        return {
            "id": video.id,
            "title": video.title,
            "channel_title": video.channel,
            "watch_ms": watched * 1000,
            "total_length_ms": video.duration * 1000,
        }
    return {
        "id": video.id,
        "title": video.title,
        "channel_title": video.channel,
        "watch_seconds": watched,
        "total_length": video.duration,
    }


def _next_click(stance: int, current: Video, slate: list[Video], rng: random.Random, noise: float) -> int:
    return rng.randrange(len(slate)) if rng.random() < noise else rule_choice(stance, current, slate)


def _draw_slate(videos: list[Video], exclude: set[str], current: Video, rng: random.Random) -> list[Video]:
    size = rng.randint(3, 5)
    pool = [v for v in videos if v.id not in exclude]
    slate = rng.sample(pool, size)
    same_channel = [v for v in pool if v.channel == current.channel and v not in slate]
    if same_channel and rng.random() < 0.35 and not any(v.channel == current.channel for v in slate):
        slate[rng.randrange(size)] = rng.choice(same_channel)
    return slate


def make_row(
    issue: str,
    videos: list[Video],
    rng: random.Random,
    noise: float,
    opinion_noise: float,
    max_prior: int,
    session: int,
) -> dict[str, Any]:
    profile = make_viewer(issue, rng)
    stance = stance_of(profile, issue)
    watched = [rng.choice(videos)]
    for _ in range(rng.randint(0, max_prior)):  # earlier steps follow the same rule
        slate = _draw_slate(videos, {v.id for v in watched}, watched[-1], rng)
        watched.append(slate[_next_click(stance, watched[-1], slate, rng, noise)])
    current = watched[-1]
    slate = _draw_slate(videos, {v.id for v in watched}, current, rng)
    click = slate[_next_click(stance, current, slate, rng, noise)]
    session_videos = watched + [click]
    step = STEP * sum(v.slant for v in session_videos)
    if rng.random() < opinion_noise:
        step = rng.choice([-STEP, 0.0, STEP])
    index_key, after_key = ("gun_index", "gun_index_2") if issue == "gun_control" else ("mw_index_w1", "mw_index_w2")
    after = round(min(1.0, max(0.0, profile[index_key] + step)), 3)
    use_ms = rng.random() < 0.5
    nested = rng.random() < 0.3  # some rows keep the survey in a nested dict, as the hub rows can
    survey = {**profile, after_key: after}
    if issue == "minimum_wage":
        survey.update(
            minwage15_w2=int(after > 0.5), mw_support_w2=after, minwage_text_w2="$15" if after > 0.5 else "$10"
        )
    row: dict[str, Any] = {
        "issue": issue,
        "participant_study": STUDY[issue],
        "session_id": f"{issue}-{session}",
        "slate_items_json": json.dumps([v.slate_item() for v in slate])
        if rng.random() < 0.5
        else [v.slate_item() for v in slate],
        "n_options": len(slate),
        "next_video_id": click.id,
        "next_video_title": click.title,
        "current_video_id": current.id,
        "current_video_title": current.title,
        "current_video_channel": current.channel,
        "watched_vids_json": [v.id for v in session_videos],
        "watched_detailed_json": [_detail(v, rng, use_ms) for v in session_videos],
    }
    if nested:
        row["selected_survey_row"] = survey
    else:
        row.update(survey)
    return row


def generate_issue(
    issue: str,
    n_train: int,
    n_validation: int,
    seed: int = 0,
    noise: float = 0.15,
    opinion_noise: float = 0.1,
    max_prior: int = 4,
) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(f"{seed}-{issue}")  # str seeds hash stably (not salted like hash())
    videos = catalog(issue, rng)
    rows = [make_row(issue, videos, rng, noise, opinion_noise, max_prior, i) for i in range(n_train + n_validation)]
    return {"train": rows[:n_train], "validation": rows[n_train:]}


def read_rule(row: dict[str, Any]) -> tuple[int, str]:
    """What a perfect reader of the prompt predicts: (1-based option, opinion direction).

    It uses only what the prompt shows (stance, channels, view counts, the watched videos
    before the current one) and the channel slants, which are constant and so learnable.
    """
    from grouprl.tasks.slates import schema

    slants = channel_slants()
    issue = schema.issue_of(row)
    before = schema.as_number(schema.field_value(row, issue.index_before)) if issue else None
    if before is None:
        raise ValueError(f"read_rule: row {row.get('id', '?')!r} has no issue with an opinion index before watching")
    stance = 1 if before > 0.5 else -1
    items = schema.slate_items(row)
    current = Video(
        row["current_video_id"],
        row["current_video_title"],
        row["current_video_channel"],
        slants[row["current_video_channel"]],
        1,
        0,
        0,
        0,
    )
    slate = [
        Video(it["id"], it["title"], it["channel_title"], slants[it["channel_title"]], 1, it["view_count"], 0, 0)
        for it in items
    ]
    choice = rule_choice(stance, current, slate)
    prior, _ = schema.prior_and_current(row)
    total = sum(slants[e["channel_title"]] for e in prior) + current.slant + slate[choice].slant
    return choice + 1, "increase" if total > 0 else "decrease" if total < 0 else "no_change"


def ceiling(rows: list[dict[str, Any]], noise: float = 0.15) -> dict[str, float]:
    """The rule reader's measured accuracies and the analytic click ceiling on raw rows."""
    from grouprl.tasks.slates import schema

    click_hits = opinion_hits = opinion_n = 0
    analytic = 0.0
    for row in rows:
        choice, opinion = read_rule(row)
        items = schema.slate_items(row)
        click_hits += schema.gold_index(items, row["next_video_id"]) == choice
        analytic += (1 - noise) + noise / len(items)
        label = schema.opinion_label(row, schema.issue_of(row))
        if label is not None:
            opinion_n += 1
            opinion_hits += label == opinion
    n = max(len(rows), 1)
    return {
        "rows": len(rows),
        "click_reader": click_hits / n,
        "click_ceiling_analytic": analytic / n,
        "opinion_reader": opinion_hits / max(opinion_n, 1),
        "click_chance": sum(1 / len(schema.slate_items(r)) for r in rows) / n,
    }


def write_dataset(
    out: str | Path,
    issues: list[str],
    n_train: int,
    n_validation: int,
    seed: int = 0,
    noise: float = 0.15,
    opinion_noise: float = 0.1,
    max_prior: int = 4,
) -> dict[str, Any]:
    """``out/<gun|wage>/{train,validation}.jsonl`` plus ``out/ceiling.json``; returns the ceilings."""
    report: dict[str, Any] = {"seed": seed, "noise": noise, "opinion_noise": opinion_noise, "max_prior": max_prior}
    for issue in issues:
        splits = generate_issue(issue, n_train, n_validation, seed, noise, opinion_noise, max_prior)
        folder = Path(out) / ISSUE_DIRS[issue]
        folder.mkdir(parents=True, exist_ok=True)
        for split, rows in splits.items():
            with (folder / f"{split}.jsonl").open("w") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in rows)
        report[issue] = ceiling(splits["validation"] or splits["train"], noise)
    (Path(out) / "ceiling.json").write_text(json.dumps(report, indent=2))
    return report
