"""GRAIL's switches: the original's environment variables, also settable as config fields.

Each switch is a config field named like its variable in lower case (``gail_lr`` <-> ``GAIL_LR``);
a set environment variable wins over the recipe (env over YAML), as in the original launchers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any


@dataclass
class GrailSettings:
    gail_use: bool = True  # 0 = plain GRPO from the same recipe
    gail_train: bool = True  # 0 = the discriminator scores but never learns
    gail_weight: float = 0.5  # the discriminator's initial share against the base rewards (1.0)
    gail_alpha: float = 1.0  # reward = alpha * P(expert)
    gail_lr: float = 2e-5
    gail_disc_model: str = "distilbert-base-uncased"
    gail_device: str = "auto"  # auto: this process's CUDA device, else CPU
    gail_eval_mode: bool = False  # 1 = scored but not trained (set automatically during evaluation)
    grail_weight_lr: float = 0.05  # the mixer's Adam learning rate
    grail_disc_show_ids: bool = False
    grail_max_history: int = 12  # watched videos in the prompt (0 or less = all)
    grail_show_ids: bool = False
    gail_replay: int = 0  # replay buffer size (0 = off)
    gail_minibatch: int = 0  # replay minibatch (0 = the batch's size)
    gail_updates: int = 1  # discriminator steps per batch
    pureacc_allow_bare_number: bool = False


def _cast(kind: Any, name: str, value: Any) -> Any:
    if kind in (bool, "bool"):
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{name}: got {value!r}; expected 0 or 1")
    try:
        return {"float": float, "int": int, "str": str}[kind if isinstance(kind, str) else kind.__name__](value)
    except ValueError:
        raise ValueError(f"{name}: got {value!r}; expected a {kind}") from None


def grail_settings(config_values: dict[str, Any] | None = None, environ: dict[str, str] | None = None) -> GrailSettings:
    """Defaults < config fields (``gail_lr: 1e-4``) < environment (``GAIL_LR=1e-4``)."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in fields(GrailSettings):
        if config_values and config_values.get(f.name) is not None:
            values[f.name] = _cast(f.type, f"config key '{f.name}'", config_values[f.name])
        if environ.get(f.name.upper(), "") != "":
            values[f.name] = _cast(f.type, f"environment variable {f.name.upper()}", environ[f.name.upper()])
    return GrailSettings(**values)


def build_discriminator(settings: GrailSettings, seed: int = 0, model: str | None = None):
    from grouprl.rewards.discriminator import GailDiscriminator

    return GailDiscriminator(model or settings.gail_disc_model, settings.gail_lr, settings.gail_alpha,
                             settings.gail_device, settings.grail_disc_show_ids, settings.gail_train,
                             replay=settings.gail_replay, minibatch=settings.gail_minibatch,
                             updates=settings.gail_updates, seed=seed)


def build_mixer(settings: GrailSettings, base_weight: float = 1.0):
    from grouprl.rewards.mixer import LearnableMixer

    return LearnableMixer(base_weight, settings.gail_weight, settings.grail_weight_lr)
