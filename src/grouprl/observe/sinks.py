"""Where per-step metrics go: metrics.jsonl always, stdout every ``logging_steps``, and one tracker
on request (``report_to``): W&B, trackio (Hugging Face's local-first tracker) or TensorBoard."""

from __future__ import annotations

import json
import numbers
import math
import os
from typing import Any, Protocol

from rich.console import Console

from grouprl.observe.jsonl import JsonlAppender, finite_only
from grouprl.config.redact import redact, redact_argv


def _scalars(values: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if isinstance(v, numbers.Real) and not isinstance(v, bool)}


class WandbTracker:
    def __init__(
        self,
        output_dir: str,
        project: str,
        run_name: str | None,
        config: dict[str, Any] | None,
        entity: str | None = None,
        group: str | None = None,
    ):
        import sys

        import wandb

        argv, sys.argv = sys.argv, redact_argv(sys.argv)  # W&B records the command line in the run's metadata
        try:
            self.run = self._init(wandb, output_dir, project, run_name, config, entity, group)
        finally:
            sys.argv = argv

    @staticmethod
    def _init(wandb, output_dir, project, run_name, config, entity, group):
        return wandb.init(
            project=os.environ.get("WANDB_PROJECT") or project,
            entity=os.environ.get("WANDB_ENTITY") or entity,
            group=os.environ.get("WANDB_RUN_GROUP") or group,
            name=os.environ.get("WANDB_NAME") or run_name,
            config=config,
            dir=output_dir,
        )

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def summary(self, values: dict[str, Any]) -> None:
        for k, v in values.items():
            self.run.summary[k] = v

    def close(self) -> None:
        self.run.finish()


class TrackioTracker:
    """trackio keeps every project in one SQLite file under ``TRACKIO_DIR`` (default
    ``$HF_HOME/trackio``), so ``trackio show`` lists this run beside earlier ones. Nothing is
    sent anywhere unless trackio is told to (a Space or dataset id), which grouprl never does."""

    def __init__(self, project: str, run_name: str | None, config: dict[str, Any] | None):
        import trackio

        self.run = trackio.init(
            project=os.environ.get("TRACKIO_PROJECT") or project,
            name=run_name,
            config=config,
            embed=False,
            auto_log_gpu=False,
            auto_log_cpu=False,
        )
        self.last_step = 0

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(_scalars(metrics), step=step)
        self.last_step = step

    def summary(self, values: dict[str, Any]) -> None:
        # trackio has no run summary: the final numbers go in as metrics at the last step
        final = {f"summary/{k}": v for k, v in _scalars(values).items()}
        if final:
            self.run.log(final, step=self.last_step)

    def close(self) -> None:
        self.run.finish()


class TensorBoardTracker:
    """Event files under ``output_dir/tensorboard`` (``tensorboard --logdir OUTPUT_DIR/tensorboard``)."""

    def __init__(self, output_dir: str, config: dict[str, Any] | None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=os.path.join(output_dir, "tensorboard"))
        if config:
            self.writer.add_text("config", "```\n" + json.dumps(config, indent=2, default=str) + "\n```", 0)
        self.last_step = 0

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for name, value in _scalars(metrics).items():
            self.writer.add_scalar(name, value, step)
        self.last_step = step

    def summary(self, values: dict[str, Any]) -> None:
        for name, value in _scalars(values).items():
            self.writer.add_scalar(f"summary/{name}", value, self.last_step)
        self.writer.add_text("summary", "```\n" + json.dumps(values, indent=2, default=str) + "\n```", self.last_step)

    def close(self) -> None:
        self.writer.close()


REPORT_TO = ("none", "wandb", "trackio", "tensorboard")


class Sink(Protocol):
    """What a run logs its metrics to: a :class:`MetricsSink` (process 0) or a :class:`NullSink` (the others)."""

    console: Console

    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def summary(self, values: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class MetricsSink:
    def __init__(
        self,
        output_dir: str,
        report_to: str = "none",
        project: str = "grouprl",
        run_name: str | None = None,
        config: dict[str, Any] | None = None,
        *,
        logging_steps: int = 1,
        console: Console | None = None,
        entity: str | None = None,
        group: str | None = None,
    ):
        if report_to not in REPORT_TO:
            raise ValueError(f"report_to: '{report_to}' is not a metrics sink; expected one of {', '.join(REPORT_TO)}")
        self.jsonl = JsonlAppender(os.path.join(output_dir, "metrics.jsonl"))
        self.logging_steps = logging_steps
        self.console = console or Console()
        config = redact(config) if config is not None else None  # trackers store it: never a key in clear
        self.tracker: WandbTracker | TrackioTracker | TensorBoardTracker | None = None
        if report_to == "wandb":
            self.tracker = WandbTracker(output_dir, project, run_name, config, entity, group)
        elif report_to == "trackio":
            self.tracker = TrackioTracker(project, run_name, config)
        elif report_to == "tensorboard":
            self.tracker = TensorBoardTracker(output_dir, config)

    @property
    def wandb_run(self):  # kept for callers that reach for the W&B run
        return self.tracker.run if isinstance(self.tracker, WandbTracker) else None

    def log(self, step: int, metrics: dict[str, float]) -> None:
        # trackers and metrics.jsonl get the same finite values: a non-finite metric is dropped to null and
        # counted (nonfinite_metrics), so a chart and a JSON reader never meet Infinity or NaN
        bad = sum(isinstance(v, float) and not math.isfinite(v) for v in metrics.values())
        if bad:
            metrics = {**finite_only(metrics), "nonfinite_metrics": float(bad)}
        self.jsonl.write({"step": step, **metrics})
        if self.tracker is not None:
            self.tracker.log(step, {k: v for k, v in metrics.items() if v is not None})
        if step % self.logging_steps == 0:
            keys = ("reward", "accuracy", "frac_reward_zero_std", "completions/mean_length", "entropy", "step_time")
            shown = "  ".join(f"{k.split('/')[-1]}={metrics[k]:.3g}" for k in keys if k in metrics)
            self.console.log(f"step {step}: {shown}")

    def summary(self, values: dict[str, Any]) -> None:
        if self.tracker is not None:
            self.tracker.summary(values)

    def close(self) -> None:
        self.jsonl.close()
        if self.tracker is not None:
            self.tracker.close()


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
