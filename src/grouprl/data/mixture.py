"""Dataset mixtures in open-r1's schema, and the train/test splits of a prompt dataset.

```yaml
dataset_mixture:
  datasets:
    - {id: org/math, config: default, split: train, columns: [problem, solution], weight: 0.5}
    - {id: data/puzzles.jsonl, columns: [problem, solution]}
  seed: 42
  test_split_size: 0.1     # a float share or an int count held out for evaluation
```

``weight`` is the *fraction of that dataset kept* (a seeded random subset of
``int(len * weight)`` rows), as in open-r1: it is not a sampling ratio, so two datasets of 10k
and 1k rows with weight 1.0 each mix 10:1. The kept parts are concatenated and shuffled with
``seed``; ``test_split_size`` then holds out a seeded test split. Every dataset must end with
the same column set (``columns`` selects them), else the load fails naming each set.
"""

from __future__ import annotations

import logging
from typing import Any

from grouprl.config.task_sections import DatasetMixture
from grouprl.data.sources import load_split

log = logging.getLogger(__name__)


class MixtureError(ValueError):
    """Datasets of a mixture that cannot be combined."""


def load_mixture(mixture: DatasetMixture | dict[str, Any]):
    """(train, test or None) as ``datasets.Dataset``s."""
    import datasets

    mixture = mixture if isinstance(mixture, DatasetMixture) else DatasetMixture.model_validate(mixture)
    parts = []
    for entry in mixture.datasets:
        ds = load_split(entry.id, entry.config, entry.split)
        if entry.columns:
            missing = [c for c in entry.columns if c not in ds.column_names]
            if missing:
                raise MixtureError(
                    f"dataset_mixture: {entry.id} (split {entry.split}) has no columns {missing}; "
                    f"it has {ds.column_names}"
                )
            ds = ds.select_columns(entry.columns)
        if entry.weight is not None:
            kept = max(1, int(len(ds) * entry.weight))
            log.debug("dataset_mixture: %s keeps %d of %d rows (weight %s)", entry.id, kept, len(ds), entry.weight)
            ds = ds.shuffle(seed=mixture.seed).select(range(kept))
        parts.append((entry, ds))
    column_sets = {tuple(sorted(ds.column_names)) for _, ds in parts}
    if len(column_sets) > 1:
        listing = "; ".join(f"{e.id} ({e.split}): {sorted(ds.column_names)}" for e, ds in parts)
        raise MixtureError(
            f"dataset_mixture: the datasets' columns differ ({listing}); select the same set with 'columns' on each"
        )
    combined = datasets.concatenate_datasets([ds for _, ds in parts]).shuffle(seed=mixture.seed)
    log.debug("dataset_mixture: %d rows from %d datasets", len(combined), len(parts))
    if not mixture.test_split_size:
        return combined, None
    return hold_out(combined, mixture.test_split_size, mixture.seed)


def hold_out(dataset, test_size: float | int, seed: int):
    """(train, test): a seeded held-out split; ``test_size`` < 1 is a share, else a row count."""
    size = test_size if test_size < 1 else int(test_size)
    if isinstance(size, int) and size >= len(dataset):
        raise MixtureError(f"test_split_size {test_size} leaves no training rows out of {len(dataset)}")
    split = dataset.train_test_split(test_size=size, seed=seed)
    return split["train"], split["test"]
