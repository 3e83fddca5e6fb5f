"""Where a warm start ends: sampled success inside a band, found by a line search over the last SFT step.

An SFT warm start for RL should stop where RL can move the model: some sampled episodes solve the task and
some fail (the group needs reward spread), but not so many that nothing is left to learn. Success does not
rise smoothly with SFT steps: a small model picks up the tool-call format all at once, and one step can take
sampled success from 0 to 34 % (SmolLM2, docs/agent_main_job.md). So a check above the band does not keep that
step whole: the weights are moved back along the last stretch, ``theta(a) = theta_below + a (theta_above -
theta_below)`` between the last check under the band and this one, and ``a`` is bisected until the measured
success falls inside the band (at most ``tries`` more checks). That is a line search on the step size of the
last stretch of SFT, nothing more: for small steps Adam's update is nearly a straight line, so a point
between two checkpoints is (to first order) the model a smaller learning rate would have reached.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch


def float_weights(model) -> dict[str, torch.Tensor]:
    """A detached copy of the model's floating-point tensors (integer buffers are not interpolated)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items() if v.is_floating_point()}


@torch.no_grad()
def step_towards(model, delta: dict[str, torch.Tensor], by: float) -> None:
    """Move the model's weights by ``by * delta`` in place (no copy of the weights beside ``delta``); a tensor
    that several names share (tied embeddings) moves once."""
    state, moved = model.state_dict(), set()
    for name, d in delta.items():
        if state[name].data_ptr() not in moved:
            moved.add(state[name].data_ptr())
            state[name].add_(d, alpha=by)


@torch.no_grad()
def into_delta(model, below: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``below`` turned in place into ``theta_now - below``: the stretch's direction, the one copy kept."""
    state = model.state_dict()
    for name, lo in below.items():
        lo.neg_().add_(state[name])
    return below


@dataclasses.dataclass
class SuccessBand:
    """A stop rule for an SFT warm start: stop at the first check with success >= ``low``; where ``high`` is
    set and the check is above it, line-search back into [low, high] (module docstring).

    Used as ``stop_when(model, tokenizer) -> bool``; ``start(model)`` before the first step records the
    weights the first stretch starts from; when the stopping check was above the band (``overshot``), the caller
    frees what training held (the optimizer's moments) and calls ``settle``. ``history`` keeps every check as
    ``(label, success)``.
    """

    measure: Callable[[Any, Any], float]
    low: float
    high: float | None = None
    tries: int = 3
    log: Callable[[str], None] = print
    history: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    overshot: bool = False
    _below: dict[str, torch.Tensor] | None = None

    def __post_init__(self) -> None:
        if self.high is not None and self.high < self.low:
            raise ValueError(f"the success band's top ({self.high}) is below its bottom ({self.low})")

    def start(self, model) -> None:
        """Weights taken as under the band: the line search's lower end until a check under the band replaces
        them. The caller passes the weights just before the first checked step (the weights SFT starts from when
        that is step 1; a later first check, ``sft_first_check``, skips steps whose checks read under the band)."""
        if self.high is not None:
            self._below = float_weights(model)

    def __call__(self, model, tokenizer) -> bool:
        success = self._check(model, tokenizer, f"check {len(self.history) + 1}")
        if success < self.low:
            if self.high is not None:
                self._below = float_weights(model)
            return False
        self.overshot = self.high is not None and success > self.high and self._below is not None
        return True

    def _check(self, model, tokenizer, label: str) -> float:
        success = self.measure(model, tokenizer)
        self.history.append((label, success))
        return success

    def settle(self, model, tokenizer) -> None:
        """Bisect ``a`` in (0, 1) between the last weights under the band (a = 0) and these (a = 1, above it).

        Ends at the first ``a`` whose success is inside the band; if none is within ``tries`` checks, at the
        smallest ``a`` measured at or above the band's bottom (above the band is better for RL than below it:
        a group with no success has no spread)."""
        assert self._below is not None and self.high is not None
        # the model moves along theta_above - theta_below from a = 1; only that direction is kept beside it (a
        # copy of theta_below and one of theta_above would be two: 0.54 GB more on SmolLM2 at the job's peak)
        delta, at = into_delta(model, self._below), 1.0
        lo, hi = 0.0, 1.0
        for _ in range(self.tries):
            a = (lo + hi) / 2
            step_towards(model, delta, a - at)
            at = a
            success = self._check(model, tokenizer, f"a = {a:.3g}")
            self.log(f"warm start line search: {a:.3g} of the last stretch -> sampled success {success:.0%}")
            if success < self.low:
                lo = a
            elif success > self.high:
                hi = a
            else:
                break
        else:
            step_towards(model, delta, hi - at)
            self.log(f"warm start: no point inside the band in {self.tries} tries; kept {hi:.3g} of the last stretch")
        self._below = None
