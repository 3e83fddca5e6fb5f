"""Random numbers keyed by a row's own seed and its token index, so that a row samples the same tokens whichever
batch it lands in.

The decode loop's draws otherwise come from torch's global generator in batch order: the j-th live row takes the
j-th uniform number of the step. Where the batch is the same every run (a trainer's rollout) that is
reproducible; where it is not -- the agent endpoint batches whichever agents' requests arrived within a few
milliseconds of each other -- one agent's sample depends on the timing of every other agent, and two runs of
the same seed part after the first batch. A keyed draw gives row r at its k-th token the number
``U(seed_r, k)``, a counter-based generator (SplitMix64's finaliser over the seed's hash and the counter, as
JAX's and Philox's keyed streams do; Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
OOPSLA 2014), so a row's draws depend on its seed only. Batch composition can still move a logit in its last
bits (another padding, another matmul blocking); that changes a token only where its draw lands within such a
shift of a boundary of the cumulative distribution: about 1e-7 of the time.

``SamplingParams.seeds`` carries one seed per prompt; the agent endpoint derives each call's from the batch's
base seed, its episode and the call's index in it (``call_seed``).
"""

from __future__ import annotations

import hashlib

import torch

_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _signed(value: int) -> int:
    """A 64-bit unsigned constant as the int64 with the same bits (torch's int64 arithmetic wraps)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(z: torch.Tensor, bits: int) -> torch.Tensor:
    """A logical right shift of int64 bits (torch's ``>>`` on int64 is arithmetic: it copies the sign bit)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def _finalise(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64's output function: every input bit reaches every output bit."""
    z = (z ^ _shift_right(z, 30)) * _signed(_MIX1)
    z = (z ^ _shift_right(z, 27)) * _signed(_MIX2)
    return z ^ _shift_right(z, 31)


def keyed_uniform(seeds: torch.Tensor, counter: int) -> torch.Tensor:
    """One float64 in [0, 1) per row of ``seeds`` (int64), the ``counter``-th of that seed's stream."""
    z = _finalise(seeds.to(torch.int64)) + _signed(_GOLDEN * (counter + 1) % (1 << 64))
    bits = _shift_right(_finalise(z), 11)  # the top 53 bits: a float64's mantissa
    return bits.to(torch.float64) * (1.0 / (1 << 53))


def call_seed(base: int, episode: str, call: int, sample: int = 0) -> int:
    """A stable 63-bit seed for one sample of one call of one episode (the same in every process and run)."""
    digest = hashlib.blake2b(f"{base}|{episode}|{call}|{sample}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1
