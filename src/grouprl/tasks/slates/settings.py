"""GRAIL's switches: the original's environment variables, also settable as config fields.

Each switch is a config field named like its variable in lower case (``gail_lr`` <-> ``GAIL_LR``);
a set environment variable wins over the recipe (env over YAML), as in the original launchers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any


def _switch(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass
class GrailSettings:
    gail_use: bool = _switch(True, "GRAIL: add the GAIL discriminator reward and the mixer (0 = plain GRPO)")
    gail_train: bool = _switch(True, "GRAIL: train the discriminator online (0 = score only)")
    gail_weight: float = _switch(0.5, "GRAIL: the discriminator's initial weight against the base rewards' 1")
    gail_alpha: float = _switch(1.0, "GRAIL: discriminator reward = alpha * P(expert)")
    gail_lr: float = _switch(2e-5, "GRAIL: discriminator AdamW learning rate")
    gail_disc_model: str = _switch("distilbert-base-uncased",
                                   "GRAIL: the discriminator: hub id or local dir ('tiny' = build one)")
    gail_device: str = _switch("auto", "GRAIL: discriminator device (auto = this process's CUDA device, else cpu)")
    gail_eval_mode: bool = _switch(False, "GRAIL: discriminator and mixer frozen for the whole run "
                                          "(evaluation freezes them anyway)")
    grail_weight_lr: float = _switch(0.05, "GRAIL: the mixer's Adam learning rate")
    grail_disc_show_ids: bool = _switch(False, "GRAIL: video ids in the discriminator's text")
    grail_max_history: int = _switch(12, "slates: watched videos shown in the prompt (0 or less = all)")
    grail_show_ids: bool = _switch(False, "slates: video ids in the prompt")
    gail_replay: int = _switch(0, "GRAIL: discriminator replay buffer size (0 = off)")
    gail_minibatch: int = _switch(0, "GRAIL: replay minibatch size (0 = the batch's size)")
    gail_updates: int = _switch(1, "GRAIL: discriminator steps per batch")
    pureacc_allow_bare_number: bool = _switch(False, "slates: a completion without <answer> tags may be a bare "
                                                     "option number")


ENV_NAMES = {f.name.upper(): f.name for f in fields(GrailSettings)}  # the original's variable names


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
    from grouprl.rewards.learned.discriminator import GailDiscriminator

    return GailDiscriminator(model or settings.gail_disc_model, settings.gail_lr, settings.gail_alpha,
                             settings.gail_device, settings.grail_disc_show_ids, settings.gail_train,
                             replay=settings.gail_replay, minibatch=settings.gail_minibatch,
                             updates=settings.gail_updates, seed=seed,
                             allow_bare_number=settings.pureacc_allow_bare_number)


def build_mixer(settings: GrailSettings, base_weight: float = 1.0):
    from grouprl.rewards.learned.mixer import LearnableMixer

    return LearnableMixer(base_weight, settings.gail_weight, settings.grail_weight_lr)
