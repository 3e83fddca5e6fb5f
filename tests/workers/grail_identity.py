"""GRAIL's discriminator and mixer under data parallelism, as run by tests/train/test_data_parallel.py: each
process scores its share of a batch with the real Scorer (slate_accuracy + GAIL discriminator + learnable
mixer); after the update both must be identical on every process and equal to one process on the whole
batch. Writes the learned state per rank to OUT/grail-w<N>-r<R>.pt."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from grouprl.records import Episode, Step
from grouprl.rewards.learned.discriminator import GailDiscriminator
from grouprl.rewards.learned.mixer import LearnableMixer
from grouprl.rewards.scorer import Scorer
from grouprl.tasks.slates.rows import prepare_rows
from grouprl.tasks.slates.synthetic import generate_issue
from grouprl.train.parallel import DataParallel, end_processes

K = 4


def slate_rows() -> list[dict]:
    return prepare_rows(generate_issue("gun_control", 8, 0, seed=0, max_prior=2)["train"], "synthetic")[0][:4]


def batch(rows: list[dict], groups: list[int]) -> list[Episode]:
    """K answers per row: the logged choice, two wrong valid choices, one unparsable."""
    out = []
    for local, g in enumerate(groups):
        row = rows[g]
        gold, n = row["gold_index"], row["n_options"]
        choices = [gold, gold % n + 1, (gold + 1) % n + 1, None]
        for k, choice in enumerate(choices):
            text = "no answer" if choice is None else f"<think>x</think><answer>{choice}</answer><opinion>up</opinion>"
            step = Step(
                prompt_text=row["question"],
                prompt_ids=[],
                action_text=text,
                action_ids=[],
                truncated=False,
                anchor_state=None,
            )
            out.append(Episode(group_id=local, index_in_group=k, row=row, steps=[step]))
    return out


def run(disc_dir: str, out: Path, parallel: DataParallel) -> None:
    rows = slate_rows()
    disc = GailDiscriminator(disc_dir, learning_rate=1e-3, device="cpu", seed=0)
    mixer = LearnableMixer(1.0, 0.5, 0.05)
    scorer = Scorer(["slate_accuracy"], [1.0], learned=[disc], learned_weights=[1.0], mixer=mixer)
    mine = parallel.rows(list(range(len(rows))))
    for _ in range(2):  # two batches: the second is scored by the updated discriminator and mixer
        scores = scorer.score(batch(rows, mine))
    torch.save(
        {
            "disc": {k: v.clone() for k, v in disc.model.state_dict().items()},
            "logits": mixer.logits.detach(),
            "scores": scores.episode,
            "metrics": scores.metrics,
        },
        out / f"grail-w{parallel.info.world_size}-r{parallel.info.rank}.pt",
    )


if __name__ == "__main__":
    run(sys.argv[2], Path(sys.argv[1]), DataParallel.start())
    end_processes(exit_process=True)
