"""Skip an update that has nothing to learn: every trained token's advantage is zero.

With A = 0 on every trained token, every built-in loss (ppo_clip, two_sided_clip, gspo, gspo_token,
cispo, sapo) has a zero gradient, yet ``AdamW.step`` would still move the weights: its first moment
carries the last non-zero gradient forward (m <- beta1 m), and weight decay shrinks them. So such a
step would move the policy on momentum alone, and pay a full forward/backward for it.

The update is skipped only when no other term gives a gradient: no KL (``beta == 0``), no entropy
bonus (neither a static coefficient nor an adaptive one), and a built-in loss (a user's loss may
have a term that does not go through A). The schedule still advances, once per optimizer step the
update would have taken, so the learning rate of every later step (and of a resumed run, whose
scheduler state is checkpointed) is the one it would have been; the optimizer state is untouched.

Under the same conditions, an update that does run leaves out the samples with nothing to learn
(``rows_that_train``: a GRPO group whose K rewards were equal, a truncated completion under
``mask_truncated_completions``): their terms and gradients are zero, so only their forward and backward
would be paid. The loss's denominators stay the whole batch's (``n_all`` samples for grpo/dr_grpo,
``total_tokens`` for dapo), so the gradient is the one the whole batch gives, up to summation order. bnpo
divides each micro-batch by its own token count, which leaving rows out would change: it keeps every row.
One process only (several must agree on their micro-batch counts).
"""

from __future__ import annotations

import warnings

import torch

# Losses whose per-token terms are zero, with zero gradient, wherever A = 0.
ZERO_AT_ZERO_ADVANTAGE = frozenset({"ppo_clip", "two_sided_clip", "gspo", "gspo_token", "cispo", "sapo"})


def zero_at_zero_advantage(cfg, bonus, loss_name: str) -> bool:
    """True when every term of the loss is zero, with zero gradient, on a token whose advantage is zero."""
    entropy = bool(bonus.enabled or bonus.applied_coef())
    return cfg.algorithm.beta == 0.0 and not entropy and loss_name in ZERO_AT_ZERO_ADVANTAGE


def nothing_to_learn(
    advantages: torch.Tensor, mask: torch.Tensor, *, beta: float, entropy_bonus: bool, loss_name: str
) -> bool:
    """True when no trained token (``mask`` (B, T)) has a non-zero advantage ((B,) or (B, T)) and no
    KL, entropy or user-loss term could give a gradient anyway. A NaN advantage counts as non-zero."""
    if beta != 0.0 or entropy_bonus or loss_name not in ZERO_AT_ZERO_ADVANTAGE:
        return False
    adv = advantages if advantages.dim() == 2 else advantages.unsqueeze(-1)
    trained = (adv.float() != 0) & mask.bool()
    return not bool(trained.any())


def skip_zero_advantage_update(learner, advantages: torch.Tensor, mask: torch.Tensor) -> dict[str, float] | None:
    """The learner's update statistics for a skipped update, or None when the update must run.

    Every process must agree (one process skipping while another joins the gradient all-reduce
    would hang), so the count of processes with something to learn is summed first."""
    cfg, bonus = learner.cfg, learner.entropy_bonus
    if not cfg.algorithm.skip_zero_advantage_updates:
        return None
    local = nothing_to_learn(
        advantages,
        mask,
        beta=cfg.algorithm.beta,
        entropy_bonus=bool(bonus.enabled or bonus.applied_coef()),
        loss_name=learner.loss.name,
    )
    if learner.parallel.total(0.0 if local else 1.0) > 0:
        return None
    with warnings.catch_warnings():  # torch's "scheduler.step() before optimizer.step()" is what we mean here
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(cfg.algorithm.num_iterations):
            learner.scheduler.step()
    return {
        "loss": 0.0,
        "grad_norm": 0.0,
        "skipped_updates": float(learner.skipped_updates),
        "skipped_zero_advantage": 1.0,
    }


def rows_that_train(learner, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
    """The indices of the samples with a trained token (``mask`` (N, T)) whose advantage ((N,) or (N, T)) is not
    zero, where leaving the others out changes no gradient; None to keep every sample (all of them train, none
    does, or leaving rows out would change the loss)."""
    cfg = learner.cfg
    if (
        not cfg.speed.skip_zero_advantage_samples
        or learner.parallel.distributed
        or learner.distill is not None
        or cfg.algorithm.loss_type == "bnpo"
        or not zero_at_zero_advantage(cfg, learner.entropy_bonus, learner.loss.name)
    ):
        return None
    adv = advantages if advantages.dim() == 2 else advantages.unsqueeze(-1)
    trains = ((adv.float() != 0) & mask.bool()).any(-1)  # NaN != 0: a NaN advantage trains (and is caught)
    rows = trains.nonzero().squeeze(-1)
    return None if rows.numel() in (0, len(trains)) else rows
