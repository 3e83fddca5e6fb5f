"""Policy losses: pure per-token functions, reached through a registry (:data:`LOSSES`).

A recipe names a loss as ``loss: <name>`` (a built-in), ``loss: path/to/file.py:function`` or
``loss: package.module:function``. A loss's signature is its declaration:

    fn(logps, old_logps, advantages, mask, *, option=default, ...) -> per_token | (per_token, stats)

- ``logps`` (B, T): log pi_theta(y_t) with gradient; ``old_logps`` (B, T): log pi_old(y_t), detached;
- ``advantages``: (B,) one per sequence (or (B, T) one per token); ``mask`` (B, T): 1 on completion tokens;
- ``per_token``: (B, T) or (B, 1) loss terms l_t *to minimise*; ``stats``: detached scalars to log.

Its keyword parameters are its options (``loss_options`` in the recipe); an option it does not
declare is an error naming it (no ``**kwargs``: a typo must not pass silently). How the terms
become one number (``loss_type``: grpo, bnpo, dapo, dr_grpo), the KL penalty, the sampling
correction's weights and the entropy bonus are applied around any loss by
:func:`grouprl.algos.loss.policy_objective`, so a new loss only writes its surrogate.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import torch

from grouprl.registry import Registry, check_options

LossFn = Callable[..., Any]
POSITIONAL = ("logps", "old_logps", "advantages", "mask")


@dataclass(frozen=True)
class Loss:
    """A registered policy loss and the options its signature declares."""

    name: str
    fn: LossFn
    options: tuple[str, ...]

    def check_options(self, options: dict[str, Any]) -> None:
        check_options("loss", self.name, self.options, options)

    def __call__(self, logps, old_logps, advantages, mask, **options) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The per-token terms and the statistics, whichever of the two forms the function returns."""
        self.check_options(options)
        out = self.fn(logps, old_logps, advantages, mask, **options)
        per_token, stats = out if isinstance(out, tuple) else (out, {})
        if not isinstance(per_token, torch.Tensor) or per_token.dim() != 2 or per_token.size(0) != logps.size(0):
            got = tuple(per_token.shape) if isinstance(per_token, torch.Tensor) else type(per_token).__name__
            raise ValueError(
                f"loss '{self.name}': expected per-token terms of shape ({logps.size(0)}, T) or "
                f"({logps.size(0)}, 1), got {got}"
            )
        return per_token, dict(stats)


def declare_loss(name: str, fn: LossFn) -> Loss:
    """Read a loss's declaration from its signature (see the module docstring)."""
    params = list(inspect.signature(fn).parameters.values())
    if any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in params):
        raise TypeError(f"loss '{name}': declare every option as a keyword parameter, not *args/**kwargs")
    names = tuple(p.name for p in params)
    required = [p.name for p in params if p.default is p.empty]
    if names[:4] != POSITIONAL or len(required) > 4:
        raise TypeError(
            f"loss '{name}': expected fn(logps, old_logps, advantages, mask, *, options...), "
            f"got parameters {list(names)}"
        )
    return Loss(name, fn, names[4:])


POLICY_LOSSES: Registry[Loss] = Registry("loss", declare_loss, config_key="loss")
LOSSES = POLICY_LOSSES  # name -> Loss
register_loss = POLICY_LOSSES.register  # @register_loss("name") on a function of the declared form
get_loss = POLICY_LOSSES.resolve  # a built-in by name, or 'path/to/file.py:function' / 'package.module:function'


def _per_token(advantages: torch.Tensor) -> torch.Tensor:
    return advantages if advantages.dim() == 2 else advantages.unsqueeze(-1)


def _masked_fraction(flags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The share of trained tokens flagged; flags of shape (B, 1) (a sequence-level ratio, GSPO): the share
    of sequences, as TRL counts them."""
    if flags.size(-1) == 1:
        return flags.to(mask.dtype).mean()
    return (flags.to(mask.dtype) * mask).sum() / mask.sum().clamp(min=1.0)


def clipped_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
    delta: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """-min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A), with rho capped at ``delta`` first when given;
    ``ratio`` (B, T) or (B, 1). The statistics are the shares of masked tokens clipped low, high, either."""
    adv = _per_token(advantages)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    capped = ratio if delta is None else torch.clamp(ratio, max=delta)
    per_token = -torch.min(capped * adv, clipped * adv)
    with torch.no_grad():
        mask = mask.to(per_token.dtype)
        low = (ratio < 1 - epsilon_low) & (adv < 0)
        high = (ratio > 1 + epsilon_high) & (adv > 0)
        stats = {
            "clip_ratio/low_mean": _masked_fraction(low, mask),
            "clip_ratio/high_mean": _masked_fraction(high, mask),
            "clip_ratio/region_mean": _masked_fraction(low | high, mask),
        }
    return per_token, stats


def sequence_log_ratio(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(1/|y|) sum_t (log pi(y_t) - log pi_old(y_t)) per sequence, shape (B, 1): GSPO's log s_i."""
    mask = mask.to(logps.dtype)
    return ((logps - old_logps) * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)


@register_loss("ppo_clip")
def ppo_clip(
    logps, old_logps, advantages, mask, epsilon_low: float = 0.2, epsilon_high: float = 0.2, delta: float | None = None
):
    """PPO's clipped surrogate per token (Schulman et al., 2017), as GRPO uses it (Shao et al., 2024):

        rho_t = pi(y_t) / pi_old(y_t)
        l_t   = -min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A)

    ``epsilon_high > epsilon_low`` is DAPO's clip-higher (Yu et al., 2025). ``delta``: two-sided
    clipping, rho_t capped at delta in the unclipped term too, so a negative advantage cannot
    push a token with a huge ratio without bound (INTELLECT-2, Prime Intellect, 2025).
    TRL: ``loss_type`` grpo/bnpo/dapo/dr_grpo with ``importance_sampling_level="token"``; verl: ``vanilla``.
    """
    return clipped_surrogate(torch.exp(logps - old_logps), advantages, mask, epsilon_low, epsilon_high, delta)


@register_loss("two_sided_clip")
def two_sided_clip(
    logps, old_logps, advantages, mask, epsilon_low: float = 0.2, epsilon_high: float = 0.2, delta: float = 4.0
):
    """PPO-clip with the ratio also capped at ``delta`` (INTELLECT-2, Prime Intellect, 2025, Eq. 3):

        l_t = -min(min(rho_t, delta) A, clip(rho_t, 1 - eps_low, 1 + eps_high) A),   delta > 1 + eps_high

    :func:`ppo_clip` with ``delta`` on by default (4, the report's value). TRL: ``delta``.
    """
    return clipped_surrogate(torch.exp(logps - old_logps), advantages, mask, epsilon_low, epsilon_high, delta)


@register_loss("gspo")
def gspo(
    logps,
    old_logps,
    advantages,
    mask,
    epsilon_low: float = 3e-4,
    epsilon_high: float = 4e-4,
    delta: float | None = None,
):
    """GSPO, sequence-level importance ratio (Zheng et al., 2025, "Group Sequence Policy Optimization", Eq. 5-7):

        s_i = (pi(y_i) / pi_old(y_i))^(1/|y_i|) = exp( (1/|y_i|) sum_t log(pi(y_t) / pi_old(y_t)) )
        l_i = -min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i)

    one term per sequence, shape (B, 1) (the aggregation weights it by the sequence's tokens as
    TRL does). The paper's clip range is 3e-4 / 4e-4 (a ratio of a length-normalised sequence
    moves far less than a token's). TRL: ``importance_sampling_level="sequence"``; verl: ``gspo``.
    """
    ratio = torch.exp(sequence_log_ratio(logps, old_logps, mask))
    return clipped_surrogate(ratio, advantages, mask, epsilon_low, epsilon_high, delta)


@register_loss("gspo_token")
def gspo_token(
    logps,
    old_logps,
    advantages,
    mask,
    epsilon_low: float = 3e-4,
    epsilon_high: float = 4e-4,
    delta: float | None = None,
):
    """GSPO-token (Zheng et al., 2025, Eq. 13-14): the sequence ratio's value, each token's own gradient,

        s_{i,t} = sg[s_i] * pi(y_t) / sg[pi(y_t)]
        l_t     = -min(s_{i,t} A_{i,t}, clip(s_{i,t}, 1 - eps_low, 1 + eps_high) A_{i,t})

    Equal to :func:`gspo` in value and gradient when A is one per sequence; with per-token
    advantages (A of shape (B, T)) each token is weighted by its own. verl: ``gspo_token``; TRL: none.
    """
    seq = sequence_log_ratio(logps, old_logps, mask).detach()
    ratio = torch.exp(seq + logps - logps.detach())
    return clipped_surrogate(ratio, advantages, mask, epsilon_low, epsilon_high, delta)


@register_loss("cispo")
def cispo(logps, old_logps, advantages, mask, epsilon_max: float = 5.0, epsilon_min: float | None = None):
    """CISPO (MiniMax-M1, 2025, Eq. 4-5): clip the importance weight, not the update, so every token
    keeps a gradient:

        l_t = -sg[clip(rho_t, epsilon_min, epsilon_max)] * A * log pi(y_t)

    ``epsilon_max`` is the weight's upper bound itself (ScaleRL, Khatri et al., 2025, recommend 5;
    TRL calls it ``epsilon_high`` under ``loss_type="cispo"``); ``epsilon_min`` an optional lower
    bound (none by default, as TRL). TRL: ``loss_type="cispo"`` (with dapo's aggregation); verl: ``cispo``.
    """
    ratio = torch.exp(logps - old_logps)
    weight = torch.clamp(ratio, min=epsilon_min, max=epsilon_max).detach()
    per_token = -weight * _per_token(advantages) * logps
    with torch.no_grad():
        # TRL's cispo_clip_ratio: the share of trained tokens with A > 0 whose weight was capped
        adv = _per_token(advantages)
        stats = {"cispo_clip_ratio": _masked_fraction((ratio > epsilon_max) & (adv > 0), mask.to(ratio.dtype))}
        if epsilon_min is not None:
            stats["cispo_clip_ratio_low"] = _masked_fraction((ratio < epsilon_min) & (adv < 0), mask.to(ratio.dtype))
    return per_token, stats


@register_loss("sapo")
def sapo(logps, old_logps, advantages, mask, temperature_pos: float = 1.0, temperature_neg: float = 1.05):
    """SAPO (Gao et al., 2025, "Soft Adaptive Policy Optimization", Eq. 6-8): a smooth gate instead of a clip,

        tau_t = temperature_pos if A > 0 else temperature_neg
        l_t   = -(4 / tau_t) * sigmoid(tau_t * (rho_t - 1)) * A

    whose gradient is A * sigmoid'(.) * 4 * grad rho_t: the full policy gradient at rho = 1, fading
    smoothly as the ratio leaves 1 (faster for negative advantages). TRL: ``loss_type="sapo"``
    (with grpo's aggregation), ``sapo_temperature_pos``/``_neg``.
    """
    adv = _per_token(advantages)
    ratio = torch.exp(logps - old_logps)
    tau = torch.where(
        adv > 0,
        torch.as_tensor(temperature_pos, dtype=ratio.dtype),
        torch.as_tensor(temperature_neg, dtype=ratio.dtype),
    )
    return -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * adv
