#!/usr/bin/env bash
# The wheels bench/device/check.py needs on a GPU machine (Python 3.12, x86-64) beyond what its image holds
# (/work/.library/device/KINDS.md, "Python packages already there"): TRL and datasets for the TRL part,
# pydantic for grouprl's config, each with the needs the image lacks (bench/device/wheels.txt, one
# NAME==VERSION a line). Downloaded into .whl/ (gitignored), ~4.5 MiB; carried with the run (carry: [".whl"]).
#
#   bash bench/device/fetch_wheels.sh            # then, on the device:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .whl && mkdir -p .whl
# shellcheck disable=SC2046
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl $(grep -v '^#' bench/device/wheels.txt)
count=$(ls .whl/*.whl | wc -l)
expected=$(grep -cv '^#' bench/device/wheels.txt)
[ "$count" -eq "$expected" ] || { echo "expected $expected wheels in .whl, found $count" >&2; exit 1; }
du -sh .whl
