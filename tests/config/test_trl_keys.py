"""Every key of TRL's GRPOConfig is classified: mapped (and in docs/data.md's 'Recipes' table), accepted only
at values that ask for what grouprl does anyway (with the reason), or refused in one line naming it.
A key a new TRL adds fails here until it is classified."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

trl = pytest.importorskip("trl")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

from transformers import TrainingArguments  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from grouprl.config.load import FIELD_SECTION  # noqa: E402
from grouprl.config.openr1 import RENAMED, RecipeKeyError, translate_recipe  # noqa: E402
from grouprl.config.trl_keys import TRL_ONLY  # noqa: E402
from grouprl.run_config import build_config  # noqa: E402

DOCS = (Path(__file__).parents[2] / "docs" / "data.md").read_text()
RECIPES = DOCS[DOCS.index("## Recipes") :]
RECIPES = RECIPES[: RECIPES.index("\n## ", 5)]
DEFAULTS = RECIPES[RECIPES.index("### Where grouprl's defaults differ") :]
INHERITED = {f.name for f in dataclasses.fields(TrainingArguments)}
FIELDS = dataclasses.fields(GRPOConfig)


def default(field):
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else None


def named(text: str) -> set[str]:
    return set(re.findall(r"`([a-z0-9_]+)", text))


def outcome(key, value):
    try:
        translate_recipe({key: value}, FIELD_SECTION, "recipe.yaml")
    except RecipeKeyError as err:
        return str(err)
    return None


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)
def test_every_grpo_config_key_is_classified(field):
    key, value = field.name, default(field)
    refusal = outcome(key, value)
    if key in TRL_ONLY:
        accepted, why = TRL_ONLY[key]
        assert key in named(RECIPES), f"{key}: not in docs/data.md's table of TRL-only keys"
        bad = outcome(key, "something else")
        assert bad is not None and "\n" not in bad and f"key '{key}'" in bad and why in bad
    elif refusal is None:  # accepted: it must be in the table (mapped, same name, or accepted as is)
        assert key in named(RECIPES), f"{key}: accepted but not in docs/data.md's 'Recipes' table"
    else:
        assert "\n" not in refusal and f"key '{key}'" in refusal
        # a GRPO key needs its own reason; a TrainingArguments key may get the generic refusal
        assert key in INHERITED, f"GRPOConfig key '{key}' is refused without saying what grouprl does instead"


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)
def test_defaults_that_differ_are_listed(field):
    ours_key = RENAMED.get(field.name, field.name)
    if ours_key not in FIELD_SECTION:
        return
    cfg = build_config(None, {}, environ={})
    ours = getattr(getattr(cfg, FIELD_SECTION[ours_key]), ours_key)
    if ours != default(field):
        assert field.name in named(DEFAULTS), f"{field.name}: TRL {default(field)!r}, grouprl {ours!r}, not listed"
