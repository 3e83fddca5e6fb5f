"""Plots from rollouts.jsonl: the reward curve and one prompt's accuracy over steps."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path

from grouprl.observe.jsonl import read_jsonl


def plot_rollouts(rollouts_path: str | Path, out_path: str | Path, prompt_id: str | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_jsonl(rollouts_path)
    if not rows:
        raise ValueError(f"{rollouts_path}: no rollout records to plot")
    by_step: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        by_step[r["step"]].append(float(r["reward"]))
    steps = sorted(by_step)
    means = [sum(by_step[s]) / len(by_step[s]) for s in steps]
    window = max(1, len(steps) // 20)
    smooth = [sum(means[max(0, i - window + 1): i + 1]) / len(means[max(0, i - window + 1): i + 1])
              for i in range(len(means))]

    if prompt_id is None:  # the prompt seen at the most distinct steps
        seen = Counter({pid: len({r["step"] for r in rows if r["prompt_id"] == pid})
                        for pid in dict.fromkeys(r["prompt_id"] for r in rows)})  # first-seen order: ties are stable
        prompt_id = seen.most_common(1)[0][0]
    mine: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        if r["prompt_id"] == prompt_id:
            mine[r["step"]].append(1.0 if r.get("correct") else 0.0)
    prompt_text = next(r["prompt"] for r in rows if r["prompt_id"] == prompt_id)
    # the question without the chat template's markers, for a readable title
    prompt_text = re.sub(r"<\|[^|]+\|>(system|user|assistant)?", " ", prompt_text).split()

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
    seen = len(mine)
    ax2.set_title(f"Prompt {prompt_id} ({seen} steps): {' '.join(prompt_text)[-50:]}", fontsize=8)
    fig.tight_layout()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
