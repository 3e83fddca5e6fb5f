"""The update phase: packed samples in, one or more optimizer steps, statistics out.

The learner owns everything a distributed wrapper (accelerate: DDP, FSDP) needs to own: the
optimizer and scheduler, the micro-batch split, the loss aggregation across micro-batches,
gradient clipping and the optimizer step. One step's rollout batch is reused for
``num_iterations`` optimizer steps, each accumulated over ``gradient_accumulation_steps``
micro-batches.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from transformers import get_scheduler

from grouprl.algos.importance import sampling_correction
from grouprl.algos.losses import micro_batch_weight, policy_loss
from grouprl.config import Config
from grouprl.policy.grouped_scoring import grouped_completion_logps, supports_grouped_scoring
from grouprl.policy.loading import Policy
from grouprl.policy.scoring import TokenBatch, completion_logps, pack
from grouprl.records import Episode

log = logging.getLogger(__name__)

UpdateStats = dict[str, float]  # loss, grad_norm, entropy, clip ratios, kl: means over the update


class NonFiniteUpdates(RuntimeError):
    """Too many updates had a non-finite loss or gradient; the run stops before the weights do."""


@dataclass
class StepSamples:
    """Every step of every episode as one training sample."""

    batch: TokenBatch
    advantages: torch.Tensor  # (N,)
    sampler_logps: torch.Tensor | None = None  # (N, T) the generation engine's log-probs, when it reports them


def pack_samples(episodes: list[Episode], advantages: torch.Tensor, pad_id: int, mask_truncated: bool) -> StepSamples:
    """One sample per step (prompt left-padded, action right-padded), with its advantage."""
    steps = [s for ep in episodes for s in ep.steps]
    batch = pack([s.prompt_ids for s in steps], [s.action_ids for s in steps], pad_id)
    if mask_truncated:
        keep = torch.tensor([not s.truncated for s in steps], dtype=batch.completion_mask.dtype)
        batch.completion_mask = batch.completion_mask * keep.unsqueeze(-1)
    sampler = None
    if steps and all(s.logprobs is not None for s in steps):
        sampler = torch.zeros(batch.completion_ids.shape, dtype=torch.float32)
        for i, s in enumerate(steps):
            sampler[i, : len(s.logprobs)] = torch.tensor(s.logprobs, dtype=torch.float32)
    return StepSamples(batch, advantages.to(torch.float32), sampler)


class Learner:
    def __init__(self, cfg: Config, policy: Policy):
        self.cfg, self.policy = cfg, policy
        train = cfg.train
        params = [p for p in policy.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=train.learning_rate, weight_decay=train.weight_decay,
                                           betas=(0.9, train.adam_beta2))
        self.scheduler = get_scheduler(train.lr_scheduler_type, self.optimizer, num_warmup_steps=train.warmup_steps,
                                       num_training_steps=train.max_steps * cfg.algorithm.num_iterations)
        self.skipped_updates = 0  # optimizer steps skipped for a non-finite loss or gradient (a metric)
        self.nonfinite: str | None = None  # why the current optimizer step must be skipped
        # One prompt pass per group where the model's attention takes a 4-D mask (same log-probs and gradients)
        grouped = cfg.speed.grouped_scoring and supports_grouped_scoring(policy.model)
        self.score_completions = grouped_completion_logps if grouped else completion_logps

    @property
    def learning_rate(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def update(self, samples: StepSamples) -> UpdateStats:
        algorithm, train = self.cfg.algorithm, self.cfg.train
        model, device = self.policy.model, self.policy.device
        batch, adv = samples.batch.to(device), samples.advantages.to(device)
        score, speed = self.score_completions, self.cfg.speed
        sampler = samples.sampler_logps
        if sampler is not None and speed.sampling_correction == "none":
            sampler = None
        correct = None if sampler is None else sampling_correction(speed.sampling_correction)
        n = len(batch)
        accum = min(train.gradient_accumulation_steps, n)
        bounds = torch.linspace(0, n, accum + 1).round().long().tolist()
        micro = [slice(bounds[i], bounds[i + 1]) for i in range(accum)]
        temperature = self.cfg.rollout.temperature
        # pi_old: only needed as a separate pass when the batch is reused (mu > 1); for mu = 1
        # pi_old = pi_theta and ratio = 1, so the detached current log-probs serve (no extra forward).
        old = ref = None
        with torch.no_grad():
            if algorithm.num_iterations > 1:
                old = torch.cat([score(model, batch.slice(m), temperature)[0] for m in micro])
            if algorithm.beta > 0:
                with self.policy.reference_context():
                    reference = self.policy.reference_model()
                    ref = torch.cat([score(reference, batch.slice(m), temperature)[0] for m in micro])
        total_tokens = float(batch.completion_mask.sum())
        stats: dict[str, list[float]] = {}
        model.train()
        for _ in range(algorithm.num_iterations):
            self.nonfinite = None
            for m in micro:
                part = batch.slice(m)
                logps, entropy = score(model, part, temperature, with_entropy=True)
                pi_old = logps.detach() if old is None else old[m]
                weights, is_stats = (None, {}) if correct is None else correct(
                    pi_old, sampler[m].to(device), part.completion_mask, cap=speed.sampling_correction_cap)
                loss, s = policy_loss(
                    logps, pi_old, adv[m], part.completion_mask,
                    loss_type=algorithm.loss_type, epsilon_low=algorithm.epsilon_low,
                    epsilon_high=algorithm.epsilon_high, beta=algorithm.beta, ref_logps=None if ref is None else ref[m],
                    max_completion_length=self.cfg.rollout.max_new_tokens, num_items_in_batch=total_tokens,
                    token_weights=weights,
                )
                s.update(is_stats)
                loss = loss * micro_batch_weight(algorithm.loss_type, len(part), n)
                if not torch.isfinite(loss):  # NaN/inf never reaches the weights; optimizer_step skips
                    self.nonfinite = f"loss {float(loss)}"
                    continue
                loss.backward()
                mask = part.completion_mask.float()
                s["entropy"] = (entropy * mask).sum() / mask.sum().clamp(min=1)
                s["loss"] = loss.detach() * accum  # mean over micro-batches then equals the batch loss
                for k, v in s.items():
                    stats.setdefault(k, []).append(float(v))
            stats.setdefault("grad_norm", []).append(self.optimizer_step())
        return {**{k: max(v) if k.endswith("_max") else min(v) if k.endswith("_min") else sum(v) / len(v)
                   for k, v in stats.items()}, "skipped_updates": float(self.skipped_updates)}

    def optimizer_step(self) -> float:
        """Clip, step the optimizer and the schedule, clear the gradients; the pre-clip gradient norm.

        A non-finite loss (seen in ``update``) or gradient norm skips the step: the weights and the
        optimizer state stay as they were, it is logged and counted, and past
        ``max_nonfinite_updates`` skips the run stops (``NonFiniteUpdates``)."""
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.model.parameters(), self.cfg.train.max_grad_norm)
        why = self.nonfinite or (None if torch.isfinite(grad_norm) else f"gradient norm {float(grad_norm)}")
        if why:
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped_updates += 1
            log.warning("skipped an update: non-finite %s (%d skipped so far)", why, self.skipped_updates)
            if self.skipped_updates > self.cfg.train.max_nonfinite_updates:
                raise NonFiniteUpdates(f"{self.skipped_updates} updates had a non-finite loss or gradient (last: "
                                       f"{why}; > max_nonfinite_updates={self.cfg.train.max_nonfinite_updates}); "
                                       "stopping before the weights are damaged")
            return 0.0  # no step was taken (skipped_updates says so); NaN would not be valid JSON
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(grad_norm)
