"""On-policy distillation objectives: pure per-token functions, reached through a table (:data:`DISTILL_OBJECTIVES`).

The student pi_theta samples y ~ pi_theta(. | x) (the rollout, as for GRPO); the teacher pi_T scores the same
tokens. Every objective here compares the two on the student's own samples, so all of them are *on-policy*
distillation (Agarwal et al., 2024, "On-Policy Distillation of Language Models: Learning from Self-Generated
Mistakes", GKD; Gu et al., 2024, "MiniLLM"; Lu & Thinking Machines Lab, 2025, "On-Policy Distillation").
GKD's lambda, the fraction of student-generated sequences in a batch, is 1 here: there is no fixed dataset
of teacher sequences to mix in.

Two forms, declared with each entry:

- ``form="reward"``: a per-token reward r_t added to each completion token's advantage,
  A_t <- A_t + distill_coef * r_t, then trained by the configured policy loss (ppo_clip, ...);
- ``form="loss"``: per-token terms d_t *to minimise*, added to the policy loss's per-token terms,
  l_t <- l_t + distill_coef * d_t, before the aggregation (``algos/loss.py:policy_objective``).

And two kinds of input: ``inputs="logps"`` takes (..., T) log-probs of the sampled tokens (the student's with
gradient for a loss, detached for a reward; the teacher's detached); ``inputs="logits"`` takes (..., V) logits
of both at the same positions (the full vocabulary: a server that returns only token log-probs cannot feed it).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch

from grouprl.registry import Registry, check_options

Form = Literal["reward", "loss"]
Inputs = Literal["logps", "logits"]


@dataclass(frozen=True)
class DistillObjective:
    """A registered objective: its form, what it reads, and the options its signature declares."""

    name: str
    fn: Callable[..., torch.Tensor]
    form: Form
    inputs: Inputs
    options: tuple[str, ...]

    def __call__(self, student: torch.Tensor, teacher: torch.Tensor, **options: Any) -> torch.Tensor:
        check_options("distill objective", self.name, self.options, options)
        return self.fn(student, teacher, **options)


def declare_objective(name: str, fn: Callable[..., torch.Tensor], *, form: Form, inputs: Inputs) -> DistillObjective:
    params = list(inspect.signature(fn).parameters)
    if params[:2] != ["student", "teacher"]:
        raise TypeError(f"distill objective '{name}': expected fn(student, teacher, *, options...), got {params}")
    return DistillObjective(name, fn, form, inputs, tuple(params[2:]))


DISTILL_OBJECTIVES: Registry[DistillObjective] = Registry("distill objective", declare_objective, takes_code=False)
get_objective = DISTILL_OBJECTIVES.resolve


@DISTILL_OBJECTIVES.register("reverse_kl_reward", form="reward", inputs="logps")
def reverse_kl_reward(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """The per-token reward of on-policy distillation as policy gradient (Thinking Machines' "On-Policy
    Distillation", 2025; prime-rl's and Tinker's recipe): minus the k1 estimate of the reverse KL,

        r_t = -(log pi_theta(y_t) - log pi_T(y_t)) = log pi_T(y_t) - log pi_theta(y_t),   y_t ~ pi_theta

    E_{y ~ pi_theta}[sum_t -r_t] = KL(pi_theta || pi_T) over the sequence, so maximising the return with a
    policy gradient minimises the reverse KL (mode seeking: the student is pushed off tokens the teacher
    finds unlikely). No discount: each token's reward is its own advantage term. ``student``: the sampler's
    log-probs (pi_old), detached."""
    return (teacher - student).detach()


@DISTILL_OBJECTIVES.register("k3", form="loss", inputs="logps")
def k3(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """The k3 estimate of the reverse KL(pi_theta || pi_T) on the student's samples, as a direct loss
    (Schulman, 2020, "Approximating KL Divergence"; GRPO's KL term, Shao et al., 2024), log r = log pi_T - log pi_theta:

        d_t = exp(log r_t) - 1 - log r_t  >= 0

    Unbiased for the KL's value with y_t ~ pi_theta; differentiated through log pi_theta only (the samples held
    fixed), its gradient is that of a forward-KL-like surrogate, not the reverse KL's score-function gradient
    (Zhang et al., 2025, "On the Design of KL-Regularized Policy Gradient Algorithms for LLM Reasoning"): the
    reward form above is the reverse KL's gradient."""
    log_r = teacher.detach() - student
    return torch.exp(log_r) - 1 - log_r


@DISTILL_OBJECTIVES.register("forward_kl", form="loss", inputs="logits")
def forward_kl(student: torch.Tensor, teacher: torch.Tensor, *, top_k: int = 0) -> torch.Tensor:
    """The forward KL(pi_T || pi_theta) over the vocabulary at every position the student sampled (GKD with
    beta = 0; Agarwal et al., 2024; the "supervised KD" term of Hinton et al., 2015, on the student's prefixes):

        d_t = sum_v pi_T(v | y_<t) (log pi_T(v | y_<t) - log pi_theta(v | y_<t))

    ``top_k`` > 0: only the teacher's k most likely tokens K_t, the teacher renormalised over them
    (p~_T = pi_T / pi_T(K_t)), the student's full log-softmax: d_t = sum_{v in K_t} p~_T(v) (log p~_T(v) -
    log pi_theta(v)), mass-covering on what the teacher keeps (k = V is the full KL)."""
    student_logp = torch.log_softmax(student.float(), dim=-1)
    teacher_logp = torch.log_softmax(teacher.detach().float(), dim=-1)
    if 0 < top_k < teacher_logp.size(-1):
        kept, index = teacher_logp.topk(top_k, dim=-1)
        kept = kept - torch.logsumexp(kept, dim=-1, keepdim=True)
        return (kept.exp() * (kept - student_logp.gather(-1, index))).sum(-1)
    return (teacher_logp.exp() * (teacher_logp - student_logp)).sum(-1)


@DISTILL_OBJECTIVES.register("jsd", form="loss", inputs="logits")
def jsd(student: torch.Tensor, teacher: torch.Tensor, *, beta: float = 0.5) -> torch.Tensor:
    """GKD's generalised Jensen-Shannon divergence (Agarwal et al., 2024, Eq. 1; TRL's
    ``GKDTrainer.generalized_jsd_loss``), with M = beta pi_T + (1 - beta) pi_theta:

        d_t = beta KL(pi_T || M) + (1 - beta) KL(pi_theta || M)

    beta = 0 is the forward KL(pi_T || pi_theta) and beta = 1 the reverse KL(pi_theta || pi_T) (TRL's limits,
    computed directly); 0 < beta < 1 interpolates, bounded where the KLs are not."""
    s = torch.log_softmax(student.float(), dim=-1)
    t = torch.log_softmax(teacher.detach().float(), dim=-1)
    if beta == 0:
        return (t.exp() * (t - s)).sum(-1)
    if beta == 1:
        return (s.exp() * (s - t)).sum(-1)
    b = torch.tensor(beta, dtype=s.dtype, device=s.device)
    m = torch.logsumexp(torch.stack([s + torch.log1p(-b), t + torch.log(b)]), dim=0)
    return beta * (t.exp() * (t - m)).sum(-1) + (1 - beta) * (s.exp() * (s - m)).sum(-1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``values`` over the positions where ``mask`` is 1 (0 when there are none)."""
    m = mask.to(values.dtype)
    return (values * m).sum() / m.sum().clamp(min=1.0)
