"""The step logs people read after a run: ``rollouts/rollouts.jsonl`` (one record per episode of every
step, ``observe/step_logs.episode_record``) and ``trajectories/step_N.jsonl`` (step 1 and every
``save_trajectories_every``-th step, every step of every episode with its advantages). An observer
of the trainer, on process 0 only; the loop itself writes nothing but metrics and checkpoints."""

from __future__ import annotations

from pathlib import Path

from grouprl.job.observer import TrainObserver
from grouprl.observe.jsonl import JsonlAppender
from grouprl.observe.step_logs import rollout_records, write_trajectories


class RolloutLogs(TrainObserver):
    def __init__(self, out: Path, log_rollouts: bool, trajectories_every: int, multi_step: bool):
        self.out, self.every, self.multi_step = Path(out), trajectories_every, multi_step
        self.rollouts = JsonlAppender(self.out / "rollouts" / "rollouts.jsonl") if log_rollouts else None

    def after_step(self, view, step: int, metrics: dict[str, float]) -> None:
        record = view.record
        if record is None:
            return
        if self.rollouts is not None:
            self.rollouts.write_many(
                rollout_records(
                    step,
                    record.episodes,
                    record.scores.verdicts,
                    record.advantages,
                    self.multi_step,
                    getattr(record, "token_signal", None),
                )
            )
        if self.every and (step % self.every == 0 or step == 1):
            write_trajectories(
                self.out / "trajectories" / f"step_{step:06d}.jsonl",
                step,
                record.episodes,
                record.scores.verdicts,
                record.advantages,
            )

    def after_train(self, view) -> None:
        if self.rollouts is not None:
            self.rollouts.close()
