"""The training loop: rollout -> rewards -> advantages -> clipped policy-gradient update.

One *step* is one rollout batch (``batch_size`` groups x ``num_generations`` episodes)
followed by ``num_iterations`` optimizer updates over it, each accumulated over
``gradient_accumulation_steps`` micro-batches.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import get_scheduler

from grouprl.algos.advantages import compute_advantages
from grouprl.algos.losses import policy_loss
from grouprl.config import Config
from grouprl.observe.jsonl import JsonlAppender
from grouprl.observe.sinks import MetricsSink
from grouprl.policy.loading import Policy
from grouprl.policy.scoring import TokenBatch, completion_logps, pack
from grouprl.records import Episode
from grouprl.rewards import sandbox
from grouprl.rewards.pipeline import score_episodes
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.runner import run_episodes
from grouprl.tasks.base import SingleTurnEnv, SingleTurnTask
from grouprl.train.checkpoint import load_checkpoint, save_checkpoint


class RowSampler:
    """Rows in a seeded order, reshuffled every epoch; ``position`` is the only state."""

    def __init__(self, rows: list[dict[str, Any]], seed: int, position: int = 0):
        self.rows, self.seed, self.position = rows, seed, position
        self._epoch, self._cached = -1, []

    def _order(self, epoch: int) -> list[int]:
        if epoch != self._epoch:  # one shuffle per epoch, derived from (seed, epoch) alone
            self._cached = list(range(len(self.rows)))
            random.Random(self.seed * 100003 + epoch).shuffle(self._cached)
            self._epoch = epoch
        return self._cached

    def next(self, n: int) -> list[dict[str, Any]]:
        out = []
        for _ in range(n):
            epoch, offset = divmod(self.position, len(self.rows))
            out.append(self.rows[self._order(epoch)[offset]])
            self.position += 1
        return out


@dataclass
class StepSamples:
    """Every step of every episode as one training sample."""

    batch: TokenBatch
    advantages: torch.Tensor  # (N,)
    episodes: list[Episode]


def episodes_to_samples(episodes: list[Episode], pad_id: int, mask_truncated: bool) -> StepSamples:
    steps = [s for ep in episodes for s in ep.steps]
    batch = pack([s.prompt_ids for s in steps], [s.action_ids for s in steps], pad_id)
    if mask_truncated:
        keep = torch.tensor([not s.truncated for s in steps], dtype=batch.completion_mask.dtype)
        batch.completion_mask = batch.completion_mask * keep.unsqueeze(-1)
    advantages = torch.tensor([s.advantage for s in steps], dtype=torch.float32)
    return StepSamples(batch, advantages, episodes)


class GRPOTrainer:
    def __init__(self, cfg: Config, policy: Policy, task: SingleTurnTask, console=None):
        self.cfg, self.policy, self.task = cfg, policy, task
        self.out = Path(cfg.train.output_dir)
        t, r = cfg.train, cfg.rollout
        params = [p for p in policy.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=t.learning_rate, weight_decay=t.weight_decay,
                                           betas=(0.9, t.adam_beta2))
        total_updates = t.max_steps * cfg.algorithm.num_iterations
        self.scheduler = get_scheduler(t.lr_scheduler_type, self.optimizer, num_warmup_steps=t.warmup_steps,
                                       num_training_steps=total_updates)
        self.sampling = SamplingParams(max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p,
                                       top_k=r.top_k, batch_size=r.generation_batch_size)
        self.sampler = RowSampler(task.train_rows, t.seed)
        self.step = 0
        self.state: dict[str, Any] = {}
        self.console = console
        self.reward_metrics: dict[str, float] = {}

    # --- one step -------------------------------------------------------------------------
    def rollout(self) -> list[Episode]:
        rows = self.sampler.next(self.cfg.rollout.batch_size)
        episodes = run_episodes(lambda i: SingleTurnEnv(self.task, rows[i]), rows, self.cfg.rollout.num_generations,
                                self.policy.model, self.policy.tokenizer, self.sampling, self.policy.device)
        t = self.cfg.task
        self.reward_metrics = score_episodes(episodes, self.task.reward_names, self.task.reward_weights,
                                             self.task.correct_reward, t.normalize_weights,
                                             t.max_reward_error_fraction, self.task.reward_options,
                                             t.sandbox_user_rewards)
        return episodes

    def assign_advantages(self, episodes: list[Episode]) -> torch.Tensor:
        a = self.cfg.algorithm
        scores = torch.tensor([ep.score for ep in episodes], dtype=torch.float32)
        groups = torch.tensor([ep.group_id for ep in episodes])
        adv = compute_advantages(a.advantage, scores, groups, scale=a.scale_rewards)
        for ep, value in zip(episodes, adv.tolist()):
            for s in ep.steps:
                s.advantage = value
        return scores

    def update(self, samples: StepSamples) -> dict[str, float]:
        cfg, model = self.cfg, self.policy.model
        a, t = cfg.algorithm, cfg.train
        batch = samples.batch.to(self.policy.device)
        adv = samples.advantages.to(self.policy.device)
        n = len(batch)
        accum = min(t.gradient_accumulation_steps, n)
        bounds = torch.linspace(0, n, accum + 1).round().long().tolist()
        micro = [slice(bounds[i], bounds[i + 1]) for i in range(accum)]
        temp = cfg.rollout.temperature
        # pi_old: only needed as a separate pass when the batch is reused (mu > 1); for mu = 1
        # pi_old = pi_theta and ratio = 1, so the detached current log-probs serve (no extra forward).
        old = ref = None
        with torch.no_grad():
            if a.num_iterations > 1:
                old = torch.cat([completion_logps(model, batch.slice(m), temp)[0] for m in micro])
            if a.beta > 0:
                with self.policy.reference_context():
                    refm = self.policy.reference_model()
                    ref = torch.cat([completion_logps(refm, batch.slice(m), temp)[0] for m in micro])
        total_tokens = float(batch.completion_mask.sum())
        stats: dict[str, list[float]] = {}
        model.train()
        for _ in range(a.num_iterations):
            for m in micro:
                part = batch.slice(m)
                logps, entropy = completion_logps(model, part, temp, with_entropy=True)
                loss, s = policy_loss(
                    logps, logps.detach() if old is None else old[m], adv[m], part.completion_mask,
                    loss_type=a.loss_type, epsilon_low=a.epsilon_low, epsilon_high=a.epsilon_high, beta=a.beta,
                    ref_logps=None if ref is None else ref[m], max_completion_length=cfg.rollout.max_new_tokens,
                    num_items_in_batch=total_tokens,
                )
                if a.loss_type != "dapo":  # per-micro-batch means, weighted by their share of the batch
                    loss = loss * (len(part) / n)  # (dapo already divides by the whole batch's tokens)
                loss.backward()
                mask = part.completion_mask.float()
                s["entropy"] = (entropy * mask).sum() / mask.sum().clamp(min=1)
                s["loss"] = loss.detach() * accum  # mean over micro-batches then equals the batch loss
                for k, v in s.items():
                    stats.setdefault(k, []).append(float(v))
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), t.max_grad_norm)
            stats.setdefault("grad_norm", []).append(float(grad_norm))
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        return {k: sum(v) / len(v) for k, v in stats.items()}

    def train_step(self) -> tuple[dict[str, float], list[Episode]]:
        start = time.perf_counter()
        episodes = self.rollout()
        gen_time = time.perf_counter() - start
        scores = self.assign_advantages(episodes)
        samples = episodes_to_samples(episodes, self.policy.tokenizer.pad_token_id,
                                      self.cfg.algorithm.mask_truncated_completions)
        metrics = self.update(samples)
        elapsed = time.perf_counter() - start
        metrics.update(self.rollout_metrics(episodes, scores))
        metrics.update(self.reward_metrics)
        metrics["sandbox_fallbacks"] = float(sandbox.SANDBOX_FALLBACKS)  # runs without bubblewrap isolation
        n_tokens = float(samples.batch.completion_mask.sum() + samples.batch.prompt_mask.sum())
        metrics.update({"step_time": elapsed, "generation_time": gen_time, "tokens_per_second": n_tokens / elapsed,
                        "learning_rate": self.scheduler.get_last_lr()[0]})
        return metrics, episodes

    def rollout_metrics(self, episodes: list[Episode], scores: torch.Tensor) -> dict[str, float]:
        K = self.cfg.rollout.num_generations
        grouped = scores.view(-1, K)
        lengths = torch.tensor([len(s.action_ids) for ep in episodes for s in ep.steps], dtype=torch.float32)
        m = {
            "reward": float(scores.mean()),
            "reward_std": float(scores.std()) if scores.numel() > 1 else 0.0,
            "frac_reward_zero_std": float((grouped.amax(dim=1) == grouped.amin(dim=1)).float().mean()),
            "accuracy": sum(ep.correct for ep in episodes) / len(episodes),
            "completions/mean_length": float(lengths.mean()),
            "completions/max_length": float(lengths.max()),
            "completions/clipped_ratio": sum(s.truncated for ep in episodes for s in ep.steps) / lengths.numel(),
        }
        for name in self.task.reward_names:
            vals = torch.tensor([ep.reward_parts[name] for ep in episodes if ep.reward_parts[name] is not None])
            if vals.numel():
                short = name.rsplit(":", 1)[-1]  # 'path/to/file.py:fn' -> 'fn'
                m[f"rewards/{short}/mean"] = float(vals.mean())
                m[f"rewards/{short}/std"] = float(vals.std()) if vals.numel() > 1 else 0.0
        return m

    # --- the loop -------------------------------------------------------------------------
    def resume(self, ckpt: str) -> None:
        state = load_checkpoint(ckpt, self.optimizer, self.scheduler)
        self.step = state["step"]
        self.sampler.position = state["data_position"]
        self.state = state.get("extra", {})

    def checkpoint(self) -> Path:
        return save_checkpoint(self.out, self.step, self.policy.model, self.policy.tokenizer, self.optimizer,
                               self.scheduler, {"data_position": self.sampler.position, "extra": self.state})

    def train(self, sink: MetricsSink) -> list[dict[str, float]]:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        t = self.cfg.train
        rollouts = JsonlAppender(self.out / "rollouts" / "rollouts.jsonl") if self.cfg.logging.log_rollouts else None
        history = []
        progress = Progress(TextColumn("GRPO"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                            TextColumn("{task.fields[info]}"), console=sink.console, transient=False)
        with progress:
            bar = progress.add_task("train", total=t.max_steps, completed=self.step, info="")
            while self.step < t.max_steps:
                metrics, episodes = self.train_step()
                self.step += 1
                sink.log(self.step, metrics)
                history.append({"step": self.step, **metrics})
                if rollouts is not None:
                    rollouts.write_many(self.rollout_records(episodes))
                progress.update(bar, completed=self.step,
                                info=f"reward {metrics['reward']:.3f} acc {metrics['accuracy']:.2f}")
                if t.save_steps and self.step % t.save_steps == 0 and self.step < t.max_steps:
                    self.checkpoint()
        if rollouts is not None:
            rollouts.close()
        self.checkpoint()
        return history

    def rollout_records(self, episodes: list[Episode]):
        for ep in episodes:
            step = ep.steps[0]
            yield {
                "step": self.step, "prompt_id": ep.prompt_id, "group": ep.group_id, "prompt": step.prompt_text,
                "completion": step.action_text, "prediction": ep.prediction,
                "ground_truth": ep.row.get("ground_truth"), "reward": ep.score, "rewards": ep.reward_parts,
                "correct": ep.correct, "advantage": step.advantage, "truncated": step.truncated,
                "reward_errors": ep.reward_errors, "reward_reasons": ep.reward_reasons,
            }
