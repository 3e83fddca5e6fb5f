"""Where a prompt dataset's rows come from: a hub id, a local dir, or one data file.

Every source ends up as a ``datasets.Dataset`` for one split:

- one file (``.jsonl``, ``.json``, ``.parquet``, ``.csv``): datasets' packaged builder for that
  format; a single file holds one split, served under every split name it is asked for only as
  ``train`` (ask ``test_split_size`` for a held-out part);
- a dir written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``: ``load_from_disk``;
- any other dir (``train.jsonl`` + ``test.jsonl``, ``data/train-*.parquet`` as the hub lays it
  out, a README with a ``configs:`` block) and any hub id: ``datasets.load_dataset(name, config,
  split=...)``, the very call a hub dataset gets, so a local copy in hub layout exercises it.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


class DatasetSourceError(ValueError):
    """A dataset source that cannot be read, or a split it does not have."""


TEXT_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".txt")


def check_utf8(path: str | Path) -> None:
    """Refuse a text data file with a byte that is not UTF-8, naming the file, the row (its line) and the
    byte, before any loader turns it into a traceback or silently into replacement characters."""
    path = Path(path)
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DatasetSourceError(
                    f"dataset file {path}: row {lineno} (line {lineno}) is not UTF-8 text (byte "
                    f"{line[err.start]:#04x} at column {err.start + 1}); expected UTF-8"
                ) from None


def _check_text_files(path: Path) -> None:
    """Every text data file of a source (one file, or a dir's files at any depth)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        if file.suffix.lower() in TEXT_SUFFIXES and not any(part.startswith(".") for part in file.parts[-2:]):
            check_utf8(file)


def _is_saved_to_disk(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()


def load_split(source: str, config: str | None, split: str):
    """One split of ``source`` as a ``datasets.Dataset`` (see the module docstring)."""
    import datasets

    path = Path(source)
    if path.exists() and not (path.is_dir() and _is_saved_to_disk(path)):
        _check_text_files(path)
    if path.is_file():
        builder = FILE_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise DatasetSourceError(
                f"dataset file {path}: unknown format {path.suffix!r}; expected one of {sorted(FILE_BUILDERS)}"
            )
        if split != "train":
            raise DatasetSourceError(
                f"dataset file {path}: a single file is the 'train' split only, asked for "
                f"{split!r}; use test_split_size or a dir with {split} files"
            )
        try:
            return datasets.load_dataset(builder, data_files=str(path), split="train")
        except Exception as err:  # noqa: BLE001 - the builders raise many kinds; one line for the user
            raise DatasetSourceError(
                f"dataset file {path}: cannot be read as {builder} ({type(err).__name__}: {str(err)[:300]})"
            ) from None
    if path.is_dir() and _is_saved_to_disk(path):
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise DatasetSourceError(f"dataset dir {path}: no split {split!r}; it has {sorted(loaded)}")
            return loaded[split]
        if split != "train":
            raise DatasetSourceError(
                f"dataset dir {path}: a saved Dataset is the 'train' split only, asked for {split!r}"
            )
        return loaded
    where = f"dataset dir {path}" if path.is_dir() else f"hub dataset {source!r}"
    log.debug("load_dataset(%r, %r, split=%r)", source, config, split)
    try:
        return datasets.load_dataset(source, config, split=split)
    except ValueError as err:  # an unknown split or config
        raise DatasetSourceError(f"{where} (config {config!r}): {str(err)[:400]}") from None
    except FileNotFoundError as err:
        raise DatasetSourceError(
            f"{where}: not found ({str(err)[:300]}); a hub id needs the network, a local path must exist"
        ) from None
