"""The world the synthetic slate rows (``synthetic.py``) are drawn from: per issue, channels with a slant
(+1 for the policy, -1 against, 0 neutral) and the topics of their videos, the video catalog, a viewer's
survey profile, and the hidden click rule (``rule_choice``) that both the generator and the rule reader
apply.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
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


def channel_slants() -> dict[str, int]:
    return {name: slant for channels in CHANNELS.values() for name, slant in channels}
