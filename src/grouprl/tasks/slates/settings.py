"""GRAIL's learned reward and mixer, built from its switches (``cfg.grail``, ``config/task_sections.py``)."""

from __future__ import annotations

from grouprl.config.task_sections import GrailConfig


def build_discriminator(settings: GrailConfig, seed: int = 0, model: str | None = None):
    from grouprl.rewards.learned.discriminator import GailDiscriminator

    return GailDiscriminator(
        model or settings.gail_disc_model,
        settings.gail_lr,
        settings.gail_alpha,
        settings.gail_device,
        settings.grail_disc_show_ids,
        settings.gail_train,
        replay=settings.gail_replay,
        minibatch=settings.gail_minibatch,
        updates=settings.gail_updates,
        seed=seed,
        allow_bare_number=settings.pureacc_allow_bare_number,
    )


def build_mixer(settings: GrailConfig, base_weight: float = 1.0):
    from grouprl.rewards.learned.mixer import LearnableMixer

    return LearnableMixer(base_weight, settings.gail_weight, settings.grail_weight_lr)
