"""The update phase: packed samples in, one or more optimizer steps, statistics out.

The learner owns everything a distributed wrapper (accelerate: DDP, FSDP) needs to own: the optimizer and
scheduler, the micro-batch split, the loss aggregation across micro-batches, gradient clipping and the optimizer
step. With several processes (``train/parallel.py``) the sample and token counts a loss averages over are the whole
batch's, each loss is weighted so that DDP's gradient average equals the single-process gradient, and gradients are
all-reduced once per optimizer step. One step's rollout batch is reused for ``num_iterations`` optimizer steps, each
accumulated over ``gradient_accumulation_steps`` micro-batches.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import get_scheduler

from grouprl.algos.importance import sampling_correction
from grouprl.algos.entropy import entropy_bonus
from grouprl.algos.loss import micro_batch_weight, policy_objective
from grouprl.config import Config, ConfigError
from grouprl.policy.grouped_scoring import (
    auto_grouped_logps,
    grouped_completion_logps,
    shared_prefix_logps,
    supports_grouped_scoring,
)
from grouprl.models.checkpointing import enable_checkpointing
from grouprl.models.loading import Policy
from grouprl.policy.scoring import TokenBatch, completion_logps, pack
from grouprl.records import Episode
from grouprl.train.objective import entropy_bonus_of, resolve_loss
from grouprl.train.distillation import Distiller
from grouprl.train.parallel import SINGLE, DataParallel
from grouprl.train.step_samples import StepSamples
from grouprl.train.zero_advantage import rows_that_train, skip_zero_advantage_update

log = logging.getLogger(__name__)

UpdateStats = dict[str, float]  # loss, grad_norm, entropy, clip ratios, kl: means over the update


@dataclass
class UpdateBatch:
    """One update's samples on the device, split into micro-batches, with the whole batch's counts."""

    tokens: TokenBatch
    advantages: torch.Tensor  # (N,) or (N, T)
    sampler_logps: torch.Tensor | None  # the engine's log-probs when a sampling correction applies
    micro: list[slice]
    n_all: float  # every process's samples
    total_tokens: float  # every process's completion tokens
    n_micro: float  # every process's micro-batches
    score: Callable[..., tuple[torch.Tensor, torch.Tensor | None]]  # (model, batch, temperature, ...) -> logps
    support: tuple[int, float] | None  # (top_k, top_p) the sampler kept, or None
    teacher: torch.Tensor | None = None  # on-policy distillation: the teacher's scores (train/distillation.py)


@dataclass
class EntropyTally:
    """The masked token entropy of one optimizer step, for the adaptive entropy bonus."""

    total: float = 0.0
    tokens: float = 0.0

    def add(self, total: float, tokens: float) -> None:
        self.total, self.tokens = self.total + total, self.tokens + tokens

    def batch_mean(self, parallel: DataParallel) -> float:
        return parallel.total(self.total) / max(parallel.total(self.tokens), 1.0)


class NonFiniteUpdates(RuntimeError):
    """Too many updates had a non-finite loss or gradient; the run stops before the weights do."""


def pack_samples(episodes: list[Episode], advantages: torch.Tensor, pad_id: int, mask_truncated: bool) -> StepSamples:
    """One sample per step (prompt left-padded, action right-padded), with its advantage."""
    if episodes and episodes[0].conversation:  # one sequence per episode, generated tokens trained
        from grouprl.train.conversation_samples import pack_conversations

        return pack_conversations(episodes, advantages, pad_id, mask_truncated)
    steps = [s for ep in episodes for s in ep.steps]
    batch = pack([s.prompt_ids for s in steps], [s.action_ids for s in steps], pad_id)
    if mask_truncated:
        keep = torch.tensor([not s.truncated for s in steps], dtype=batch.completion_mask.dtype)
        batch.completion_mask = batch.completion_mask * keep.unsqueeze(-1)
    sampler = None
    if steps and all(s.logprobs is not None for s in steps):
        sampler = torch.zeros(batch.completion_ids.shape, dtype=torch.float32)
        for i, s in enumerate(steps):
            logprobs = s.logprobs or []  # every step has them (checked above)
            sampler[i, : len(logprobs)] = torch.tensor(logprobs, dtype=torch.float32)
    return StepSamples(batch, advantages.to(torch.float32), sampler)


class Learner:
    def __init__(self, cfg: Config, policy: Policy, parallel: DataParallel = SINGLE):
        self.cfg, self.policy, self.parallel = cfg, policy, parallel
        train = cfg.train
        if cfg.runtime.gradient_checkpointing:
            enable_checkpointing(policy.model)
        # The training forward runs through the wrapper (DDP/FSDP); FSDP replaces the parameters,
        # so the optimizer is built on the wrapped module's.
        self.model = parallel.wrap(policy.model)
        params = [p for p in self.model.parameters() if p.requires_grad]
        # Fused AdamW (one kernel over all parameters; what TRL's default adamw_torch_fused uses): 6x less
        # optimizer time than the per-tensor loop on a 0.5B model on CPU. FSDP's sharded DTensors keep
        # the plain implementation.
        fused = not parallel.fsdp and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
        self.optimizer = torch.optim.AdamW(
            params,
            lr=train.learning_rate,
            weight_decay=train.weight_decay,
            betas=(0.9, train.adam_beta2),
            fused=fused or None,
        )
        self.scheduler = get_scheduler(
            train.lr_scheduler_type,
            self.optimizer,
            num_warmup_steps=train.warmup_steps,
            num_training_steps=train.max_steps * cfg.algorithm.num_iterations,
        )
        self.skipped_updates = 0  # optimizer steps skipped for a non-finite loss or gradient (a metric)
        self.nonfinite: str | None = None  # why the current optimizer step must be skipped
        self.loss, self.loss_options = resolve_loss(cfg)  # the registered loss and its checked options
        self.entropy_bonus = entropy_bonus_of(cfg)  # static or adaptive; its state is checkpointed
        self.distill = Distiller(cfg, policy) if cfg.distill.distill_coef > 0 else None  # the teacher, or None
        # One prompt pass per group where the model's attention takes a 4-D mask (same log-probs and gradients).
        # One process only: it calls the decoder and the head directly, past DDP's/FSDP's forward hooks.
        grouped = cfg.speed.grouped_scoring and supports_grouped_scoring(policy.model) and not parallel.distributed
        layout = cfg.speed.grouped_layout
        if layout == "auto" and cfg.runtime.gradient_checkpointing:  # a checkpointed layer cannot keep the cache
            layout = "block_mask"
        if grouped and layout == "prefix_cache" and cfg.runtime.gradient_checkpointing:
            raise ConfigError(
                "config key 'grouped_layout': prefix_cache cannot run under gradient_checkpointing "
                "(a re-run layer would append to the prompt's cache again); use auto or block_mask"
            )
        layouts = {
            "auto": auto_grouped_logps,
            "prefix_cache": shared_prefix_logps,
            "block_mask": grouped_completion_logps,
        }
        self.score_completions = layouts[layout] if grouped else completion_logps
        # conversations (tool results read, not trained): a group's first prompt once, through the KV cache
        self.score_conversations = shared_prefix_logps if grouped and layout != "block_mask" else completion_logps

    @property
    def learning_rate(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def update(self, samples: StepSamples) -> UpdateStats:
        """One update, as CleanRL's: pi_old and the reference once, then ``num_iterations`` optimizer steps,
        each over the micro-batches. Statistics are means over the processes (grad_norm is the same
        everywhere)."""
        batch = self.update_batch(samples)
        if self.distill is not None:  # on-policy distillation: the teacher scores every sample once
            batch.teacher = self.distill.score(batch.tokens)
        elif (skipped := skip_zero_advantage_update(self, batch.advantages, batch.tokens.completion_mask)) is not None:
            return skipped  # every advantage zero: AdamW would move the weights on momentum alone
        old, ref = self.old_and_reference_logps(batch)
        stats: dict[str, list[float]] = {}
        self.model.train()
        for _ in range(self.cfg.algorithm.num_iterations):
            self.nonfinite = None
            coef = self.entropy_bonus.applied_coef()  # fixed for the whole optimizer step
            entropy = EntropyTally()
            for i, m in enumerate(batch.micro):
                micro_stats = self.micro_step(batch, m, i == len(batch.micro) - 1, old, ref, coef, entropy)
                for k, v in micro_stats.items():
                    stats.setdefault(k, []).append(v)
            stats.setdefault("grad_norm", []).append(self.optimizer_step())
            if self.entropy_bonus.enabled:  # adaptive: toward the target, from the whole batch's entropy
                self.entropy_bonus.update(entropy.batch_mean(self.parallel))
                stats.setdefault("entropy_coef", []).append(coef)
        return {**self.summarise(stats), **(self.distill.step_metrics if self.distill else {})}

    def update_batch(self, samples: StepSamples) -> UpdateBatch:
        """The samples on the device, their micro-batches, the whole batch's counts and how to score them."""
        parallel, speed, rollout, device = self.parallel, self.cfg.speed, self.cfg.rollout, self.policy.device
        tokens, advantages = samples.batch.to(device), samples.advantages.to(device)
        sampler = None if speed.sampling_correction == "none" else samples.sampler_logps
        sampler = None if sampler is None else sampler.to(device)
        n = len(tokens)
        accum = parallel.micro_batches(n, self.cfg.train.gradient_accumulation_steps)
        n_all, total_tokens = parallel.total(n), parallel.total(float(tokens.completion_mask.sum()))
        if (rows := rows_that_train(self, advantages, tokens.completion_mask)) is not None:  # the rest: zero grad
            tokens, advantages, sampler = (
                tokens.slice(rows),
                advantages[rows],
                None if sampler is None else sampler[rows],
            )
            accum = math.ceil(len(rows) / math.ceil(n / accum))  # micro-batches no larger than configured
        bounds = torch.linspace(0, len(tokens), accum + 1).round().long().tolist()
        return UpdateBatch(
            tokens=tokens,
            advantages=advantages,
            sampler_logps=sampler,
            micro=[slice(bounds[i], bounds[i + 1]) for i in range(accum)],
            n_all=n_all,  # the whole batch's samples and tokens (one process: its own), left-out samples included
            total_tokens=total_tokens,
            n_micro=parallel.total(float(accum)),  # every process's micro-batches (bnpo averages over them)
            score=self.score_conversations if tokens.completion_attention is not None else self.score_completions,
            # top-k / top-p: pi and pi_old renormalised over the kept tokens, as the engine's log-probs are
            # (the reference stays the full distribution, as NeMo-RL and prime-rl keep it)
            support=(rollout.top_k, rollout.top_p) if rollout.top_k > 0 or rollout.top_p < 1 else None,
        )

    @torch.no_grad()
    def old_and_reference_logps(self, batch: UpdateBatch) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """pi_old as its own pass only when the batch is reused (mu > 1): for mu = 1, pi_old = pi_theta and the
        ratio is 1, so the detached current log-probs serve (no extra forward). The reference when beta > 0."""
        temperature, old, ref = self.cfg.rollout.temperature, None, None
        if self.cfg.algorithm.num_iterations > 1:
            old = torch.cat(
                [batch.score(self.policy.model, batch.tokens.slice(m), temperature, support=batch.support)[0]
                 for m in batch.micro]
            )  # fmt: skip
        if self.cfg.algorithm.beta > 0:
            with self.policy.reference_context():
                reference = self.policy.reference_model()
                ref = torch.cat([batch.score(reference, batch.tokens.slice(m), temperature)[0] for m in batch.micro])
        return old, ref

    def micro_step(
        self,
        batch: UpdateBatch,
        m: slice,
        last: bool,
        old: torch.Tensor | None,
        ref: torch.Tensor | None,
        coef: float,
        entropy: EntropyTally,
    ) -> dict[str, float]:
        """Forward, loss and backward of one micro-batch; its statistics (none when its loss is non-finite)."""
        part, world, speed = batch.tokens.slice(m), self.parallel.info.world_size, self.cfg.speed
        with self.parallel.accumulate(self.model, sync=last):
            logps, token_entropy = batch.score(
                self.model, part, self.cfg.rollout.temperature, with_entropy="grad" if coef else True,
                support=batch.support,
            )  # fmt: skip
            assert token_entropy is not None  # asked for (with_entropy)
            pi_old = logps.detach() if old is None else old[m]
            weights, is_stats = None, dict[str, torch.Tensor]()
            if batch.sampler_logps is not None:  # the engine sampled, not pi_old: sampling_correction's weights
                correct = sampling_correction(speed.sampling_correction)
                weights, is_stats = correct(
                    pi_old, batch.sampler_logps[m], part.completion_mask, cap=speed.sampling_correction_cap
                )
            loss, s = self.micro_loss(batch, m, logps, pi_old, None if ref is None else ref[m], weights)
            if coef:  # - c * the whole batch's mean token entropy, whatever the split
                loss = loss + entropy_bonus(token_entropy, part.completion_mask, coef, batch.total_tokens) * world
            if not torch.isfinite(loss):  # NaN/inf never reaches the weights: optimizer_step skips
                self.nonfinite = f"loss {float(loss)}"
            # Backward even then: under DDP every process must join the gradient all-reduce.
            loss.backward()
        if self.nonfinite:  # its statistics would be NaN too (and NaN is not valid JSON)
            return {}
        mask = part.completion_mask.float()
        entropy.add(float((token_entropy.detach() * mask).sum()), float(mask.sum()))
        s.update(is_stats)
        s["entropy"] = (token_entropy.detach() * mask).sum() / mask.sum().clamp(min=1)
        s["loss"] = loss.detach() * len(batch.micro) / world  # summed over processes: the batch loss
        return {k: float(v) for k, v in s.items()}

    def micro_loss(
        self,
        batch: UpdateBatch,
        m: slice,
        logps: torch.Tensor,
        pi_old: torch.Tensor,
        ref: torch.Tensor | None,
        weights: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The registered loss around its objective (``algos/loss.py``), weighted so that the accumulated
        gradient of every micro-batch and process is the whole batch's."""
        algorithm, part = self.cfg.algorithm, batch.tokens.slice(m)
        advantages, extra, extra_stats = batch.advantages[m], None, dict[str, torch.Tensor]()
        if self.distill is not None and batch.teacher is not None:  # its reward in A_t, or its loss terms
            advantages, extra, extra_stats = self.distill.terms(
                self.model, part, logps, pi_old, advantages, batch.teacher[m], rows=m
            )
        loss, stats = policy_objective(
            self.loss,
            logps,
            pi_old,
            advantages,
            part.completion_mask,
            self.loss_options,
            algorithm.loss_type,
            beta=algorithm.beta,
            ref_logps=ref,
            kl_estimator=self.cfg.objective.kl_estimator,
            max_completion_length=self.cfg.rollout.max_new_tokens,
            num_items_in_batch=batch.total_tokens,
            token_weights=weights,
            extra_terms=extra,
        )
        stats.update(extra_stats)
        # x world: DDP averages the processes' gradients, the batch loss is their sum.
        weight = micro_batch_weight(algorithm.loss_type, len(part), batch.n_all, batch.n_micro)
        return loss * weight * self.parallel.info.world_size, stats

    def summarise(self, stats: dict[str, list[float]]) -> UpdateStats:
        """Means over the update's micro-batches (max of ``*_max``, min of ``*_min``), then over processes;
        the loss summed over processes."""
        means = {
            k: max(v) if k.endswith("_max") else min(v) if k.endswith("_min") else sum(v) / len(v)
            for k, v in stats.items()
        }
        loss_sum = self.parallel.total(means.pop("loss", 0.0))
        return {**self.parallel.mean_metrics(means), "loss": loss_sum, "skipped_updates": float(self.skipped_updates)}

    def optimizer_step(self) -> float:
        """Clip, step the optimizer and the schedule, clear the gradients; the pre-clip gradient norm.

        A non-finite loss (seen in ``update``, on any process) or gradient norm skips the step on
        every process together: the weights and the optimizer state stay as they were, it is logged
        and counted, and past ``max_nonfinite_updates`` skips the run stops (``NonFiniteUpdates``)."""
        grad_norm = self.parallel.clip_grad_norm(self.model, self.cfg.train.max_grad_norm)
        bad_somewhere = self.parallel.total(1.0 if self.nonfinite else 0.0) > 0
        why = (
            self.nonfinite
            or ("loss on another process" if bad_somewhere else None)
            or (None if math.isfinite(grad_norm) else f"gradient norm {grad_norm}")
        )
        if why:
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped_updates += 1
            log.warning("skipped an update: non-finite %s (%d skipped so far)", why, self.skipped_updates)
            if self.skipped_updates > self.cfg.train.max_nonfinite_updates:
                raise NonFiniteUpdates(
                    f"{self.skipped_updates} updates had a non-finite loss or gradient (last: "
                    f"{why}; > max_nonfinite_updates={self.cfg.train.max_nonfinite_updates}); "
                    "stopping before the weights are damaged"
                )
            return 0.0  # no step was taken (skipped_updates says so); NaN would not be valid JSON
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm

    def release(self) -> None:
        """Training over, the final checkpoint written: Adam's moments (2x the trainable weights) go."""
        self.optimizer.state.clear()
