"""A user's loss (``loss: path/to/file.py:function``) held to the loss contract at every call.

The contract (``algos/policy_losses.py``): ``fn(logps, old_logps, advantages, mask, **options)`` returns
per-token terms, a floating tensor of shape (B, T) or (B, 1) that carries the gradient of ``logps``,
optionally with a dict of statistics. A return that breaks it is one line naming the function, what it
returned and what was expected (:class:`UserLossError`), not a traceback from deep inside the update or,
for a detached tensor, an update that silently learns nothing.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from grouprl.config import ConfigError


class UserLossError(ConfigError):
    """A user's loss returned something the loss contract does not allow."""


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r:.40}"


def check_loss_output(name: str, out: Any, logps: torch.Tensor) -> None:
    """Raise :class:`UserLossError` unless ``out`` is per-token terms (or terms and a dict of statistics)."""
    expected = f"({logps.size(0)}, {logps.size(-1)}) or ({logps.size(0)}, 1)"
    where = f"loss '{name}'"
    terms, stats = out if isinstance(out, tuple) and len(out) == 2 else (out, {})
    if not isinstance(terms, torch.Tensor):
        raise UserLossError(
            f"{where} returned {_describe(out)}; expected a float tensor of per-token terms {expected}, "
            "or (terms, dict of statistics)"
        )
    if not terms.is_floating_point():
        raise UserLossError(f"{where} returned {_describe(terms)}; expected a float tensor {expected}")
    if terms.dim() != 2 or terms.size(0) != logps.size(0) or terms.size(1) not in (1, logps.size(-1)):
        raise UserLossError(f"{where} returned {_describe(terms)}; expected per-token terms {expected}")
    if logps.requires_grad and not terms.requires_grad:
        raise UserLossError(
            f"{where} returned terms without a gradient (detached, computed under no_grad, or from old_logps "
            "only); expected terms computed from logps"
        )
    if not isinstance(stats, dict):
        raise UserLossError(f"{where} returned statistics as {_describe(stats)}; expected a dict of scalars")


def checked_user_loss(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with every return checked by :func:`check_loss_output`; keeps its signature (its options)."""
    import functools

    @functools.wraps(fn)
    def checked(logps, old_logps, advantages, mask, **options):
        out = fn(logps, old_logps, advantages, mask, **options)
        check_loss_output(name, out, logps)
        return out

    return checked
