"""The training loop: rollout -> rewards -> advantages -> clipped policy-gradient update.

One *step* is one rollout batch (``batch_size`` groups x ``num_generations`` episodes)
followed by ``num_iterations`` optimizer updates over it, each accumulated over
``gradient_accumulation_steps`` micro-batches.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import get_scheduler

from grouprl.algos.advantages import StepTensors, discounted_returns, gigpo_parts, step_advantages
from grouprl.algos.anchors import anchor_group_ids
from grouprl.algos.losses import policy_loss
from grouprl.config import Config
from grouprl.observe.jsonl import JsonlAppender
from grouprl.observe.sinks import MetricsSink
from grouprl.policy.loading import Policy
from grouprl.policy.scoring import TokenBatch, completion_logps, pack
from grouprl.records import Episode
from grouprl.rewards import sandbox
from grouprl.rewards.pipeline import score_episodes
from grouprl.rewards.registry import import_callable
from grouprl.rollout.env_pool import LocalEnvPool, make_pool
from grouprl.rollout.generation import SamplingParams
from grouprl.rollout.runner import SINGLE_TURN, RunnerOptions, run_episodes
from grouprl.tasks import Task
from grouprl.train.checkpoint import load_checkpoint, save_checkpoint

log = logging.getLogger(__name__)


def runner_options(cfg: Config, task: Task) -> RunnerOptions:
    """The runner's options: the config's for environments, one plain step for single-turn rows."""
    if not task.multi_step:
        return SINGLE_TURN
    r = cfg.rollout
    return RunnerOptions(max_steps=r.max_episode_steps, history_length=r.history_length,
                         action_pattern=r.action_pattern or None, invalid_action_penalty=r.invalid_action_penalty,
                         show_admissible_actions=r.show_admissible_actions)


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


def assign_advantages(cfg: Config, episodes: list[Episode], state_key=None) -> torch.Tensor:
    """Group steps into anchor groups, compute the configured estimator, and write returns,
    both GiGPO parts, anchor ids and the advantage onto every step. Returns the episode scores."""
    a = cfg.algorithm
    scores = torch.tensor([ep.score for ep in episodes], dtype=torch.float32)
    groups = torch.tensor([ep.group_id for ep in episodes])
    steps = [(e, s) for e, ep in enumerate(episodes) for s in ep.steps]
    anchors = anchor_group_ids([episodes[e].group_id for e, _ in steps], [s.anchor_state for _, s in steps],
                               a.anchor_mode, a.similarity_threshold, state_key)
    tensors = StepTensors(episode=torch.tensor([e for e, _ in steps], dtype=torch.long),
                          rewards=torch.tensor([s.reward for _, s in steps], dtype=torch.float32),
                          anchor=torch.tensor(anchors, dtype=torch.long))
    options = dict(scale=a.scale_rewards, gamma=a.gamma, step_advantage_weight=a.step_advantage_weight,
                   norm=a.gigpo_norm, episode_stats=a.episode_stats)
    if a.advantage == "gigpo":
        parts = gigpo_parts(scores, groups, tensors, **{k: v for k, v in options.items() if k != "scale"})
        returns, ep_adv, step_adv, adv = parts.returns, parts.episode_advantage, parts.step_advantage, parts.advantage
        sizes = parts.anchor_size
    else:
        adv = step_advantages(a.advantage, scores, groups, tensors, **options)
        returns, ep_adv, step_adv = discounted_returns(tensors.rewards, tensors.episode, a.gamma), adv, None
        sizes = torch.bincount(tensors.anchor)[tensors.anchor]
    for j, (_, s) in enumerate(steps):
        s.returns, s.episode_advantage, s.advantage = float(returns[j]), float(ep_adv[j]), float(adv[j])
        s.step_advantage = float(step_adv[j]) if step_adv is not None else 0.0
        s.anchor_group, s.anchor_group_size = anchors[j], int(sizes[j])
    if log.isEnabledFor(logging.DEBUG):
        log_groups(episodes)
    return scores


def log_groups(episodes: list[Episode]) -> None:
    """LOGLEVEL=DEBUG: per episode group, its anchor groups with their steps' returns and advantages."""
    by_group: dict[int, list[Episode]] = {}
    for ep in episodes:
        by_group.setdefault(ep.group_id, []).append(ep)
    for g, eps in by_group.items():
        anchors: dict[int, list[str]] = {}
        for ep in eps:
            for t, s in enumerate(ep.steps):
                anchors.setdefault(s.anchor_group, []).append(
                    f"e{ep.index_in_group}t{t}: R={s.returns:.3f} A_E={s.episode_advantage:+.3f} "
                    f"A_S={s.step_advantage:+.3f} A={s.advantage:+.3f}")
        log.debug("group %d: scores %s; %d anchor groups (%d non-singleton)", g,
                  [round(ep.score, 3) for ep in eps], len(anchors), sum(len(v) > 1 for v in anchors.values()))
        for anchor, members in anchors.items():
            log.debug("  anchor %d (size %d): %s", anchor, len(members), "; ".join(members))


class GRPOTrainer:
    def __init__(self, cfg: Config, policy: Policy, task: Task, console=None):
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
        self.options = runner_options(cfg, task)
        self.pool = make_pool(r.env_workers, r.ray_address) if task.multi_step else LocalEnvPool()
        key = cfg.algorithm.state_key
        self.state_key = import_callable(key) if key else None

    # --- one step -------------------------------------------------------------------------
    def rollout(self) -> list[Episode]:
        rows = self.sampler.next(self.cfg.rollout.batch_size)
        episodes = run_episodes([self.task.env_factory(row) for row in rows], rows,
                                self.cfg.rollout.num_generations, self.policy.model, self.policy.tokenizer,
                                self.sampling, self.policy.device, self.options,
                                [self.task.seed_of(row) for row in rows], self.pool)
        t = self.cfg.task
        self.reward_metrics = score_episodes(episodes, self.task.reward_names, self.task.reward_weights,
                                             self.task.correct_reward, t.normalize_weights,
                                             t.max_reward_error_fraction, self.task.reward_options,
                                             t.sandbox_user_rewards, t.default_step_reward)
        return episodes

    def assign_advantages(self, episodes: list[Episode]) -> torch.Tensor:
        start = time.perf_counter()
        scores = assign_advantages(self.cfg, episodes, self.state_key)
        self.advantage_time = time.perf_counter() - start
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
                        "advantage_time": self.advantage_time, "learning_rate": self.scheduler.get_last_lr()[0]})
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
            "samples": float(lengths.numel()),  # one per step: an episode of n steps is n samples
        }
        if self.task.multi_step:
            steps = [s for ep in episodes for s in ep.steps]
            m.update({
                "success_rate": sum(ep.success for ep in episodes) / len(episodes),
                "episode_length": sum(len(ep.steps) for ep in episodes) / len(episodes),
                "invalid_action_rate": sum(not s.valid for s in steps) / max(len(steps), 1),
                "anchor_nonsingleton_share": sum(s.anchor_group_size > 1 for s in steps) / max(len(steps), 1),
                "step_advantage_abs": sum(abs(s.step_advantage) for s in steps) / max(len(steps), 1),
            })
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
        every = self.cfg.logging.save_trajectories_every
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
                if every and (self.step % every == 0 or self.step == 1):
                    write_trajectories(self.out / "trajectories" / f"step_{self.step:06d}.jsonl", self.step, episodes)
                progress.update(bar, completed=self.step,
                                info=f"reward {metrics['reward']:.3f} acc {metrics['accuracy']:.2f}")
                if t.save_steps and self.step % t.save_steps == 0 and self.step < t.max_steps:
                    self.checkpoint()
        if rollouts is not None:
            rollouts.close()
        self.pool.close()
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
                "episode_length": len(ep.steps),
            }


def trajectory_records(step: int, episodes: list[Episode]):
    """Every step of every episode, with what the estimator made of it."""
    for ep in episodes:
        for t, s in enumerate(ep.steps):
            yield {
                "train_step": step, "episode": ep.episode_id, "group": ep.group_id, "seed": ep.seed, "t": t,
                "observation": s.observation, "action": s.action_text, "valid": s.valid,
                "env_reward": s.env_reward, "penalty": s.penalty, "base_reward": s.reward, "return": s.returns,
                "episode_score": ep.score, "success": ep.success, "episode_advantage": s.episode_advantage,
                "step_advantage": s.step_advantage, "advantage": s.advantage, "anchor_group": s.anchor_group,
                "anchor_group_size": s.anchor_group_size, "info": s.info,
            }


def write_trajectories(path: Path, step: int, episodes: list[Episode]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".jsonl.tmp")  # written whole, then renamed: never a half file
    tmp.unlink(missing_ok=True)
    with JsonlAppender(tmp) as sink:
        sink.write_many(trajectory_records(step, episodes))
    tmp.replace(path)
