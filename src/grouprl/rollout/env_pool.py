"""Where the environments of a rollout live: in this process, or spread over Ray actors.

A pool holds one environment per episode of a rollout. The runner talks to it in batches
(``start`` once, then ``step`` with every live episode's action), so a remote pool makes
one call per worker per step, not one per environment. Environments are built from
*factories*: zero-argument picklable callables (``functools.partial(GridWorld, size=4)``),
so a remote worker can build them where they run.
"""

from __future__ import annotations

from typing import Any, Protocol

from grouprl.records import Observation, StepResult
from grouprl.tasks.interface import EnvFactory, Environment, instructions_of

__all__ = ["EnvFactory", "EnvPool", "Environment", "LocalEnvPool", "instructions_of", "make_pool"]


class EnvPool(Protocol):
    def start(self, factories: list[EnvFactory], seeds: list[int | None]) -> tuple[list[Observation], list[str]]:
        """Build one env per factory, reset env ``i`` with ``seeds[i]``; the first observations
        and each env's instructions."""

    def step(self, indices: list[int], actions: list[str]) -> list[StepResult]:
        """``env[indices[j]].step(actions[j])`` for every j, results in the same order."""

    def close(self) -> None: ...


class LocalEnvPool:
    """Environments in the trainer process (the default; right for cheap environments)."""

    def __init__(self) -> None:
        self.envs: list[Any] = []

    def start(self, factories: list[EnvFactory], seeds: list[int | None]) -> tuple[list[Observation], list[str]]:
        self.envs = [make() for make in factories]
        observations = [env.reset(seed) for env, seed in zip(self.envs, seeds)]
        return observations, [instructions_of(env) for env in self.envs]

    def step(self, indices: list[int], actions: list[str]) -> list[StepResult]:
        return [self.envs[i].step(a) for i, a in zip(indices, actions)]

    def close(self) -> None:
        self.envs = []


def make_pool(env_workers: int, ray_address: str | None = None) -> EnvPool:
    """``LocalEnvPool()`` for ``env_workers <= 1``, else a ``RayEnvPool`` of ``env_workers``
    actors (connecting to ``ray_address`` if given, else starting a local Ray cluster if none
    is running). Ray is imported only here, so ``import grouprl`` does not need it."""
    if env_workers <= 1:
        return LocalEnvPool()
    from grouprl.rollout.ray_pool import RayEnvPool

    return RayEnvPool(env_workers, ray_address)
