"""Small helpers shared by the run-hardening tests: a tiny arithmetic training run via the real CLI."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from grouprl.cli import main


# the tiny arithmetic run the hardening tests share: 2 prompts x 4 samples a step, 4 new tokens, no evaluation
TINY_RUN = ["--task", "arithmetic", "--batch_size", "2", "--num_generations", "4", "--max_new_tokens", "4"]
TINY_RUN += ["--n_eval", "0", "--device", "cpu", "--seed", "3"]


def train(model_dir: Path, out: Path, *extra: str) -> int:
    """One tiny run through ``grouprl train`` (2 prompts x 4 samples a step)."""
    return main(
        ["train", "--model_name_or_path", str(model_dir), "--output_dir", str(out), "--max_steps", "1"]
        + [*TINY_RUN, "--n_train", "20", *extra]
    )


def metric_steps(out: Path) -> list[int]:
    """The steps metrics.jsonl holds, in order ([] before the first is written)."""
    path = out / "metrics.jsonl"
    if not path.is_file():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip().startswith("{")]
    return [r["step"] for r in records if "step" in r]


def rollout_steps(out: Path) -> Counter:
    """Step -> how many rollout records rollouts/rollouts.jsonl holds for it."""
    path = out / "rollouts" / "rollouts.jsonl"
    return Counter(json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip())


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def user_file(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def one_step_episodes(answers: list[str], truth: str = "1", question: str = "q") -> list:
    """One single-turn episode per answer (group 0), as the scorer receives them."""
    from grouprl.records import Episode, Step

    eps = []
    for i, answer in enumerate(answers):
        ep = Episode(group_id=0, index_in_group=i, row={"question": question, "ground_truth": truth})
        ep.steps.append(
            Step(
                prompt_text="p",
                prompt_ids=[1],
                action_text=answer,
                action_ids=[2],
                truncated=False,
                anchor_state=None,
                messages=[{"role": "user", "content": question}],
            )
        )
        eps.append(ep)
    return eps
