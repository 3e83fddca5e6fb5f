"""The ``slates`` task (GRAIL): predict the next click on a recommendation slate and the opinion shift.

Data: ``dataset_name_or_path`` = a hub id (default: ``od2961/grail-gun`` or ``od2961/grail-wage``
by ``slate_issue``), a local dir/file in the same schema, or ``synthetic`` (generated in memory,
see ``synthetic.py``). With ``gail_use`` the task also hands the scorer its learned reward (the
GAIL discriminator) and the mixer (``scorer_extras``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grouprl.config import Config
from grouprl.config.task_sections import GrailConfig
from grouprl.records import Episode
from grouprl.rewards.builtin.slate_accuracy import parse_slate_answer
from grouprl.tasks.base import SingleTurnTask
from grouprl.tasks.registry import register_task
from grouprl.tasks.slates.prompt import SYSTEM_PROMPT
from grouprl.tasks.slates.rows import HUB_IDS, load_raw_split, prepare_rows
from grouprl.tasks.slates.settings import build_discriminator, build_mixer
from grouprl.tasks.slates.synthetic import generate_issue

log = logging.getLogger(__name__)


@dataclass
class SlateTask(SingleTurnTask):
    settings: GrailConfig = field(default_factory=GrailConfig)
    seed: int = 0
    output_dir: str = "."
    tiny_tokenizer: str = "word"

    def tokenizer_corpus(self) -> str:
        """The whole text (a word tokenizer needs words, not only characters)."""
        rows = self.train_rows + self.eval_rows
        return "\n".join([self.system_prompt or "", *(r["question"] + r["gold_completion"] for r in rows)])

    def scorer_extras(self, cfg: Config | None = None) -> dict[str, Any]:
        """The GAIL discriminator and the mixer for the scorer (nothing with ``gail_use`` off)."""
        s = self.settings
        if not s.gail_use:
            return {}
        model = s.gail_disc_model
        if model == "tiny":
            model = str(self.tiny_discriminator())
        disc, mixer = build_discriminator(s, self.seed, model), build_mixer(s, base_weight=1.0)
        disc.frozen = mixer.frozen = s.gail_eval_mode
        return {"learned": [disc], "learned_weights": [1.0], "mixer": mixer}

    def tiny_discriminator(self) -> Path:
        from grouprl.models.tiny_words import build_tiny_classifier

        out = Path(self.output_dir) / "tiny_discriminator"
        if (out / "config.json").is_file():
            return out
        corpus = self.tokenizer_corpus() + " CHOSEN VIEWER: SLATE: STATE: (none) (untitled) [id ]"
        return build_tiny_classifier(corpus, out, seed=self.seed)

    def eval_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        """Next-click and opinion accuracy, parsed rate (a number in <answer>) and formatted rate (<answer>)."""
        answers = [
            parse_slate_answer(ep.steps[-1].action_text if ep.steps else "", self.settings.pureacc_allow_bare_number)
            for ep in episodes
        ]
        n = max(len(episodes), 1)
        labelled = [(a, ep.row["opinion_label"]) for a, ep in zip(answers, episodes) if ep.row["opinion_label"]]
        return {
            "next_click_accuracy": sum(
                a.in_range(ep.row["n_options"]) and a.choice == ep.row["gold_index"] for a, ep in zip(answers, episodes)
            )
            / n,
            "opinion_accuracy": sum(a.opinion == label for a, label in labelled) / max(len(labelled), 1),
            "parsed_rate": sum(a.choice is not None for a in answers) / n,
            "formatted_rate": sum(a.formatted for a in answers) / n,
        }


def _rows(cfg: Config, s, settings: GrailConfig) -> tuple[list, list]:
    source = cfg.task.dataset_name_or_path or HUB_IDS[s.slate_issue]
    options = dict(
        solution_key=s.slate_solution_column, max_history=settings.grail_max_history, show_ids=settings.grail_show_ids
    )
    if source == "synthetic":
        n_train = cfg.task.n_train or 2000
        splits = generate_issue(
            s.slate_issue,
            n_train,
            s.slate_synthetic_validation,
            s.slate_synthetic_seed,
            max_prior=s.slate_synthetic_max_prior,
        )
        return (
            prepare_rows(splits["train"], "synthetic:train", **options)[0],
            prepare_rows(splits["validation"], "synthetic:validation", **options)[0],
        )
    train = prepare_rows(load_raw_split(source, s.slate_train_split), f"{source}:{s.slate_train_split}", **options)[0]
    held_out = prepare_rows(load_raw_split(source, s.slate_eval_split), f"{source}:{s.slate_eval_split}", **options)[0]
    return train, held_out


@register_task("slates", max_new_tokens=48)
def build_slates(cfg: Config) -> SlateTask:
    slates = cfg.slates
    settings = cfg.grail  # GAIL_USE=0 etc. are already in it (the section declares them as environment aliases)
    train, held_out = _rows(cfg, slates, settings)
    if cfg.task.n_train:
        train = train[: cfg.task.n_train]
    system = SYSTEM_PROMPT if cfg.task.system_prompt is None else cfg.task.system_prompt
    bare = {"allow_bare_number": settings.pureacc_allow_bare_number}
    return SlateTask(
        "slates",
        train,
        held_out,
        system,
        ["slate_accuracy"],
        "slate_click",
        reward_kwargs={"slate_accuracy": bare},
        settings=settings,
        seed=cfg.train.seed,
        output_dir=cfg.train.output_dir,
        tiny_tokenizer=slates.slate_tiny_tokenizer,
    )
