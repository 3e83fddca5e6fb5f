"""The bottom of the config: a section's base class, the config error, and the one value parser."""

from __future__ import annotations

from typing import Any, ClassVar

import yaml
from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A recipe, environment variable or flag that names an unknown key or holds a bad value."""


class Section(BaseModel):
    """One section of the config (``cfg.<name>``): typed fields whose names are unique across sections.

    ``former_sections``: section names under which a recipe may still nest this section's fields
    (``schedule: {warmup_ratio: 0.1}`` when ``warmup_ratio`` now lives in ``train``).
    ``env_aliases``: environment variables that set a field besides ``GROUPRL_<FIELD>``
    (GRAIL's ``GAIL_USE``...); a set variable wins over the recipe.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=())
    former_sections: ClassVar[tuple[str, ...]] = ()
    env_aliases: ClassVar[dict[str, str]] = {}


def parse_value(text: str) -> Any:
    """A flag or environment value as a YAML scalar ("true", "1e-4", "null", "[a, b]"); pydantic then
    checks it against the field's type, so every source of a value goes through the same two steps."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text
