"""Where per-step metrics go: metrics.jsonl always, stdout every ``logging_steps``, W&B on request."""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console

from grouprl.observe.jsonl import JsonlAppender


class MetricsSink:
    def __init__(self, output_dir: str, report_to: str = "none", project: str = "grouprl",
                 run_name: str | None = None, config: dict[str, Any] | None = None, logging_steps: int = 1,
                 console: Console | None = None):
        self.jsonl = JsonlAppender(os.path.join(output_dir, "metrics.jsonl"))
        self.logging_steps = logging_steps
        self.console = console or Console()
        self.wandb_run = None
        if report_to == "wandb":
            import wandb

            self.wandb_run = wandb.init(
                project=os.environ.get("WANDB_PROJECT") or project,
                group=os.environ.get("WANDB_RUN_GROUP") or None,
                name=os.environ.get("WANDB_NAME") or run_name,
                config=config,
                dir=output_dir,
            )

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **metrics}
        self.jsonl.write(record)
        if self.wandb_run is not None:
            self.wandb_run.log(metrics, step=step)
        if step % self.logging_steps == 0:
            keys = ("reward", "accuracy", "frac_reward_zero_std", "completions/mean_length", "entropy", "step_time")
            shown = "  ".join(f"{k.split('/')[-1]}={metrics[k]:.3g}" for k in keys if k in metrics)
            self.console.log(f"step {step}: {shown}")

    def summary(self, values: dict[str, Any]) -> None:
        if self.wandb_run is not None:
            for k, v in values.items():
                self.wandb_run.summary[k] = v

    def close(self) -> None:
        self.jsonl.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()


class NullSink:
    """What processes other than process 0 of a multi-process run log to: nothing (process 0
    writes metrics.jsonl and W&B for the whole batch)."""

    def __init__(self):
        self.console = Console(quiet=True)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def summary(self, values: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass
