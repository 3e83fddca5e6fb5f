"""The run's objective from its config: the registered loss with its options, and the entropy bonus.

The loss comes from the registry (``algos/policy_losses.py``), built-in or the user's own. Its
options are ``loss_options``, plus ``epsilon_low`` / ``epsilon_high`` from the algorithm section
when the recipe sets them and the loss declares them (GSPO's own defaults, 3e-4 / 4e-4, are not
overridden by the PPO defaults); an option the loss does not declare is an error naming it.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from grouprl.algos.entropy import EntropyBonus
from grouprl.algos.policy_losses import Loss, get_loss
from grouprl.config import ConfigError
from grouprl.registry import options_from_config
from grouprl.user_code import names_code
from grouprl.train.user_loss import checked_user_loss

log = logging.getLogger(__name__)

# loss option -> the algorithm-section field that sets it (when set and declared)
ALGORITHM_OPTIONS = {"epsilon_low": "epsilon_low", "epsilon_high": "epsilon_high"}


def resolve_loss(cfg) -> tuple[Loss, dict[str, Any]]:
    """The configured loss and its options; a bad name or option is a ``ConfigError`` (one line)."""
    objective, algorithm = cfg.objective, cfg.algorithm
    try:
        loss = get_loss(objective.loss)
    except (KeyError, TypeError) as err:
        raise ConfigError(f"config key 'loss' (section objective): {err.args[0] if err.args else err}") from None
    if names_code(objective.loss):  # a user's loss: every return checked against the contract (train/user_loss.py)
        loss = replace(loss, fn=checked_user_loss(loss.name, loss.fn))
    options = options_from_config(algorithm, ALGORITHM_OPTIONS, loss.options, "loss", loss.name, only_set=True)
    options.update(objective.loss_options)
    try:
        loss.check_options(options)
    except ValueError as err:
        raise ConfigError(f"config key 'loss_options' (section objective): {err}") from None
    return loss, options


def entropy_bonus_of(cfg) -> EntropyBonus:
    o = cfg.objective
    if o.entropy_target is not None and not o.entropy_coef_min <= o.entropy_coef <= o.entropy_coef_max:
        raise ConfigError(
            f"config key 'entropy_coef' (section objective): got {o.entropy_coef}; expected a value "
            f"within [entropy_coef_min, entropy_coef_max] = [{o.entropy_coef_min}, {o.entropy_coef_max}]"
        )
    return EntropyBonus(o.entropy_coef, o.entropy_target, o.entropy_coef_delta, o.entropy_coef_min, o.entropy_coef_max)
