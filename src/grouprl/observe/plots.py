"""Plots from rollouts.jsonl: the reward curve and one prompt's accuracy over steps."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from pathlib import Path

from grouprl.observe.jsonl import step_of


def rollout_rows(path: str | Path) -> list[dict]:
    """The rollout records of ``path`` that a plot can use (a whole-number step, a finite reward, a
    prompt id); other lines are skipped. ``ConfigError`` when the path is not such a file."""
    from grouprl.config import ConfigError
    from grouprl.observe.dashboard.rollout_index import parse_lines

    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder; expected a rollouts.jsonl file (OUTPUT_DIR/rollouts/rollouts.jsonl)")
    data = path.read_bytes()  # a missing file: FileNotFoundError, named by the CLI
    rows = []
    for record in parse_lines(data):
        step, reward = step_of(record), record.get("reward")
        if (
            step is not None
            and isinstance(reward, (int, float))
            and not isinstance(reward, bool)
            and math.isfinite(reward)
            and isinstance(record.get("prompt_id"), (str, int))
        ):
            rows.append({**record, "step": step, "prompt_id": str(record["prompt_id"])})
    if not rows:
        lines = len(data.splitlines())
        raise ConfigError(
            f"{path}: no rollout record (a step, a finite reward, a prompt_id) in its {lines} line(s); "
            "expected the rollouts.jsonl a grouprl run writes"
        )
    return rows


def plot_rollouts(rollouts_path: str | Path, out_path: str | Path, prompt_id: str | None = None) -> Path:
    """Two panels into ``out_path``: the mean reward per step (with a moving average), and one prompt's
    fraction of the group correct per step (``prompt_id``, default the prompt seen at the most steps)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = _image_path(out_path, plt)
    rows = rollout_rows(rollouts_path)
    steps, means, smooth, window = _reward_curve(rows)
    prompt_id, mine, prompt_words = _prompt_accuracy(rows, prompt_id, rollouts_path)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot(steps, means, alpha=0.35, label="mean reward")
    ax1.plot(steps, smooth, label=f"moving average ({window})")
    ax1.set_xlabel("step")
    ax1.set_ylabel("reward")
    ax1.set_title("Training reward")
    ax1.legend()
    ps = sorted(mine)
    ax2.plot(ps, [sum(mine[s]) / len(mine[s]) for s in ps], marker="o")
    ax2.set_ylim(-0.05, 1.05)
    ax2.set_xlabel("step")
    ax2.set_ylabel("fraction of group correct")
    ax2.set_title(f"Prompt {prompt_id} ({len(mine)} steps): {' '.join(prompt_words)[-50:]}", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _image_path(out_path: str | Path, plt) -> Path:
    """``out_path`` when it names an image file matplotlib can write, else ``ConfigError`` listing the kinds."""
    from grouprl.config import ConfigError

    out = Path(out_path)
    formats = plt.figure().canvas.get_supported_filetypes()
    plt.close("all")
    if out.is_dir() or (out.suffix and out.suffix[1:].lower() not in formats):
        raise ConfigError(
            f"--out {out}: expected an image file to write, ending in one of "
            f"{', '.join('.' + f for f in sorted(formats))}"
        )
    return out


def _reward_curve(rows: list[dict]) -> tuple[list[int], list[float], list[float], int]:
    """(steps, the mean reward of each, its moving average, the average's window: a 20th of the steps)."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        by_step[r["step"]].append(float(r["reward"]))
    steps = sorted(by_step)
    means = [sum(by_step[s]) / len(by_step[s]) for s in steps]
    window = max(1, len(steps) // 20)
    smooth = [
        sum(means[max(0, i - window + 1) : i + 1]) / len(means[max(0, i - window + 1) : i + 1])
        for i in range(len(means))
    ]
    return steps, means, smooth, window


def _prompt_accuracy(
    rows: list[dict], prompt_id: str | None, rollouts_path: str | Path
) -> tuple[str, dict[int, list[float]], list[str]]:
    """(the prompt's id, its samples' correctness per step, the words of its text) for ``prompt_id``, or
    for the prompt seen at the most distinct steps; ``ConfigError`` when the id is not in the file."""
    from grouprl.config import ConfigError

    ids = dict.fromkeys(r["prompt_id"] for r in rows)
    if prompt_id is not None and str(prompt_id) not in ids:
        raise ConfigError(
            f"--prompt_id {prompt_id}: not in {rollouts_path}; it has {len(ids)} prompt(s), e.g. "
            f"{', '.join(list(ids)[:5])}"
        )
    if prompt_id is None:  # the prompt seen at the most distinct steps
        seen = Counter(
            {pid: len({r["step"] for r in rows if r["prompt_id"] == pid}) for pid in ids}
        )  # first-seen order: ties are stable
        prompt_id = seen.most_common(1)[0][0]
    prompt_id = str(prompt_id)
    mine: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        if r["prompt_id"] == prompt_id:
            mine[r["step"]].append(1.0 if r.get("correct") else 0.0)
    prompt_text = str(next(r.get("prompt", "") for r in rows if r["prompt_id"] == prompt_id))
    # the question without the chat template's markers, for a readable title
    prompt_words = re.sub(r"<\|[^|]+\|>(system|user|assistant)?", " ", prompt_text).split()
    return prompt_id, mine, prompt_words
