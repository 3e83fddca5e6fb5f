"""On resume the config's optimizer and schedule settings win over the checkpoint's, and each change is said.

Loading an optimizer's and a scheduler's state dicts brings back the settings they were built with:
the learning rate (the scheduler's ``base_lrs`` and each group's ``initial_lr``), ``weight_decay`` and
the betas. HF Trainer resumes that way, so a learning rate changed for the resumed run is replaced by
the checkpoint's without a word. Here the run's config wins: after the states are loaded, every group
gets the config's values, the scheduler the config's base rate (its shape, warmup and length are the
config's already: the learner built it), and the rate of the current step is recomputed. The moments
(AdamW's m and v) and the step count are the checkpoint's. One log line per changed key says so.

The schedule's shape is not in a scheduler's state dict, so :func:`schedule_of` records it at save time
(in ``trainer_state.json``); a checkpoint written before that is compared on lr, weight_decay and betas.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

log = logging.getLogger(__name__)

# transformers' schedule functions -> grouprl's lr_scheduler_type
SCHEDULE_TYPES = {
    "_get_linear_schedule_with_warmup_lr_lambda": "linear",
    "_get_cosine_schedule_with_warmup_lr_lambda": "cosine",
    "_get_constant_lambda": "constant",
    "_get_constant_schedule_with_warmup_lr_lambda": "constant_with_warmup",
}


def schedule_of(scheduler) -> dict[str, Any]:
    """The schedule's type, warmup and length, read from the scheduler's lr function (empty if unknown)."""
    fns = getattr(scheduler, "lr_lambdas", None)
    if not fns:
        return {}
    fn = fns[0]
    inner = fn.func if isinstance(fn, functools.partial) else fn
    name = SCHEDULE_TYPES.get(getattr(inner, "__name__", ""))
    if name is None:  # not one of transformers' schedules: nothing to compare
        return {}
    out: dict[str, Any] = {"lr_scheduler_type": name}
    keywords = fn.keywords if isinstance(fn, functools.partial) else {}
    if "num_warmup_steps" in keywords:
        out["warmup_steps"] = keywords["num_warmup_steps"]
    if "num_training_steps" in keywords:
        out["optimizer_steps"] = keywords["num_training_steps"]  # max_steps x num_iterations
    return out


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) != len(b) or any(_differs(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) > 1e-12 * max(abs(a), abs(b), 1.0)
    return a != b


def apply_config_settings(optimizer, scheduler, train_cfg, saved_schedule: dict[str, Any], where: str) -> list[str]:
    """Put the config's lr, weight_decay and betas into the loaded optimizer and scheduler; return (and
    log) one line per setting whose checkpoint value differed."""
    groups = optimizer.param_groups
    lr = train_cfg.learning_rate
    betas = (groups[0]["betas"][0], train_cfg.adam_beta2) if groups and "betas" in groups[0] else None
    saved = {
        "learning_rate": scheduler.base_lrs[0] if getattr(scheduler, "base_lrs", None) else None,
        "weight_decay": groups[0].get("weight_decay") if groups else None,
        "adam_beta2": groups[0]["betas"][1] if betas else None,
        **{k: v for k, v in saved_schedule.items()},
    }
    now = {
        "learning_rate": lr,
        "weight_decay": train_cfg.weight_decay,
        "adam_beta2": train_cfg.adam_beta2,
        **schedule_of(scheduler),
    }
    changed = [
        f"resume from {where}: {key} was {saved[key]} in the checkpoint, this run's config says {now[key]}: "
        "the config's value is used"
        for key in now
        if saved.get(key) is not None and _differs(saved[key], now[key])
    ]
    for group in groups:
        group["initial_lr"] = lr
        group["weight_decay"] = train_cfg.weight_decay
        if betas is not None:
            group["betas"] = betas
    if hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs = [lr for _ in groups]
        step = scheduler.last_epoch
        rates = [base * fn(step) for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
        for group, rate in zip(groups, rates):
            group["lr"] = rate
        scheduler._last_lr = rates
    for line in changed:
        log.warning(line)
    return changed
