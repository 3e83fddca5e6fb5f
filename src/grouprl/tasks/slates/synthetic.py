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
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHANNELS = {
    "gun_control": [
        ("Safe Streets Now", 1),
        ("Moms For Safety", 1),
        ("Liberty Arms Talk", -1),
        ("Second Amendment Daily", -1),
        ("Civic Desk", 0),
        ("Open Debate", 0),
    ],
    "minimum_wage": [
        ("Fair Pay Forum", 1),
        ("Workers Voice", 1),
        ("Small Business Hour", -1),
        ("Free Market Minute", -1),
        ("Civic Desk", 0),
        ("Open Debate", 0),
    ],
}
TOPICS = {
    "gun_control": {
        1: ["background checks save lives", "why we need safer gun laws", "the cost of gun violence"],
        -1: ["the right to bear arms", "gun bans do not work", "self defense at home"],
        0: ["the gun debate explained", "what the data says on guns", "a town hall on guns"],
    },
    "minimum_wage": {
        1: ["why workers need fifteen dollars", "living wage stories", "raise the wage now"],
        -1: ["how wage hikes cost jobs", "small shops and the wage law", "the case against fifteen"],
        0: ["the minimum wage explained", "economists on the wage", "a debate on pay"],
    },
}
OPENERS = ["", "watch: ", "new: ", "live: "]
STUDY = {"gun_control": "study1", "minimum_wage": "study2"}
ISSUE_DIRS = {"gun_control": "gun", "minimum_wage": "wage"}
STEP = 0.04


@dataclass
class Video:
    id: str
    title: str
    channel: str
    slant: int
    duration: int
    views: int
    likes: int
    comments: int

    def slate_item(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "channel_title": self.channel,
            "duration": self.duration,
            "view_count": self.views,
            "like_count": self.likes,
            "comment_count": self.comments,
        }


def catalog(issue: str, rng: random.Random) -> list[Video]:
    videos, seen = [], set()
    for channel, slant in CHANNELS[issue]:
        topics = TOPICS[issue][slant]
        for opener in OPENERS:
            for topic in topics:
                title = f"{opener}{topic}"
                if title in seen:  # two channels of one slant share topics; titles stay unique
                    title += " part two"
                seen.add(title)
                vid = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(11))
                views = rng.randint(1_000, 2_000_000)
                videos.append(
                    Video(
                        vid,
                        title,
                        channel,
                        slant,
                        rng.randint(60, 900),
                        views,
                        views // rng.randint(20, 80),
                        views // rng.randint(200, 900),
                    )
                )
    return videos


def make_viewer(issue: str, rng: random.Random) -> dict[str, Any]:
    party = rng.choice(["Democrat", "Republican", "Independent"])
    supports = rng.random() < {"Democrat": 0.8, "Republican": 0.2, "Independent": 0.5}[party]
    before = round(rng.uniform(0.55, 0.9) if supports else rng.uniform(0.1, 0.45), 3)
    ideology = {"Democrat": rng.randint(1, 4), "Republican": rng.randint(4, 7), "Independent": rng.randint(3, 5)}
    profile = {
        "age": rng.randint(18, 75),
        "q26": rng.choice(["Man", "Woman"]),
        "q29": rng.choice(["White", "Black", "Hispanic", "Asian"]),
        "pid1": party,
        "pid2": rng.choice(["strong", "not strong"]),
        "ideo1": ideology[party],
        "q31": rng.choice(["under $25,000", "$25,000-$49,999", "$50,000-$99,999", "$100,000 or more"]),
        "college": int(rng.random() < 0.45),
        "freq_youtube": rng.choice(["daily", "several times a week", "weekly", "rarely"]),
        "pol_interest": rng.choice(["very interested", "somewhat interested", "not interested"]),
        "religpew": rng.choice(["Protestant", "Catholic", "Nothing in particular", "Jewish"]),
        "newsint": rng.choice(["most of the time", "some of the time", "hardly at all"]),
    }
    if issue == "gun_control":
        profile.update(
            stricter_laws=int(supports),
            handgun_ban=int(supports and rng.random() < 0.5),
            assault_ban=int(supports or rng.random() < 0.2),
            concealed_safe=int(not supports),
            gun_importance=rng.randint(1, 5),
            gun_index=before,
            gun_enthusiasm=rng.randint(1, 5),
        )
    else:
        profile.update(
            minwage15_w1=int(supports),
            mw_support_w1=before,
            minwage_text_w1="$15" if supports else "$10",
            mw_index_w1=before,
        )
    return profile


def stance_of(profile: dict[str, Any], issue: str) -> int:
    return 1 if profile["gun_index" if issue == "gun_control" else "mw_index_w1"] > 0.5 else -1


def rule_choice(stance: int, current: Video, slate: list[Video]) -> int:
    """The hidden rule (0-based index into the slate)."""
    same = [i for i, v in enumerate(slate) if v.channel == current.channel]
    if same:
        return same[0]
    agree = [i for i, v in enumerate(slate) if v.slant == stance]
    pool = agree or list(range(len(slate)))
    return max(pool, key=lambda i: slate[i].views)


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


def channel_slants() -> dict[str, int]:
    return {name: slant for channels in CHANNELS.values() for name, slant in channels}


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
