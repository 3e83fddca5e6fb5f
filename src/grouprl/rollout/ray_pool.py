"""Environments spread over Ray actors: for environments whose ``step`` is slow (a simulator, a
web page, a compiler, a tool call that waits), so that one rollout's envs step in parallel.

Why it is shaped this way:

- **One call per worker per step.** ``num_workers`` long-lived actors each hold a share of the
  rollout's environments. ``step`` sends every actor a single remote call carrying all of its
  (env, action) pairs and gathers them with one ``ray.get``, so the per-step overhead is a
  few round trips, however many environments there are. A remote call costs about a
  millisecond (serialization, scheduling, a round trip; a whole pool ``step`` measures 2-3 ms
  on a 2-core machine in ``bench/rollouts/env_scaling.py``), so one call per environment would pay that
  for every env, every step.
- **Generation stays batched in the trainer.** Only the environments move out of the process;
  the policy still generates every live episode's action in one batch, on the trainer's
  device. The runner drives this pool exactly like :class:`~grouprl.rollout.env_pool.LocalEnvPool`.
- **Actors are created once** (in the constructor) and reused across ``start`` calls: worker
  processes take seconds to start, a rollout's ``start`` only ships factories.

How environments are split: **round-robin** — env ``i`` lives on worker ``i % num_workers``,
as that worker's env ``i // num_workers``. The runner lays out groups contiguously
(the ``group_size`` episodes of a group are neighbours), so round-robin puts a group's episodes
on different workers, and when some groups finish early the live envs stay spread evenly.

Errors: an exception inside an environment (its factory, ``reset`` or ``step``) is caught in
the actor and raised in the trainer as :class:`EnvError`, naming the env index, the worker, the
original exception type and message, with the remote traceback attached, rather than a
``RayTaskError``. A worker that dies (segfault, out of memory) raises :class:`EnvError` naming
the worker and its envs.

Ray cluster: if Ray is already initialized it is used as is. Otherwise ``address`` connects to
an existing cluster (``ray.init(address=...)``; the workers' Python must be able to import
``grouprl`` and your environment classes), and with no address a small local cluster is
started (no dashboard, a 128 MB object store). Actors ask for ``num_cpus=0`` by default, so
any number of them can be scheduled on any machine (more workers than cores just time-share
them); pass ``num_cpus=1`` to make Ray reserve a core each on a real cluster. Actors are placed
with Ray's ``SPREAD`` strategy, so on a multi-node cluster they spread over the nodes.

Factories travel by pickle: classes of an installed package (``grouprl.tasks.envs``) or of the
script you run (``__main__``, shipped by value) just work; a class in some other module must be
importable by the workers (Ray puts the driver's working directory on their path), or be
registered with ``ray.cloudpickle.register_pickle_by_value(module)``.

``close()`` kills the actors. It never shuts Ray down, not even a local cluster this pool
started: a later pool in the same process (the next rollout, the evaluation) reuses it instead
of paying the cluster start again, and Ray shuts it down itself when the process exits (call
``ray.shutdown()`` to do it earlier).
"""

from __future__ import annotations

import contextlib
import traceback
from typing import Any

from grouprl.records import Observation, StepResult
from grouprl.tasks.interface import EnvFactory, instructions_of

LOCAL_OBJECT_STORE_BYTES = 128 * 1024 * 1024
_ACTION_PREVIEW = 80
_IMPORT_HINT = (
    " (the workers import your environment classes by module name: install their package, run from "
    "the directory that holds it, or call ray.cloudpickle.register_pickle_by_value(module))"
)


class EnvError(RuntimeError):
    """An environment of a :class:`RayEnvPool` failed. ``env_index`` is its index in the
    rollout (``None`` when a whole worker died), ``original_type`` the remote exception's
    class name, ``remote_traceback`` the traceback text from the worker."""

    def __init__(self, message: str, env_index: int | None = None, original_type: str = "", remote_traceback: str = ""):
        super().__init__(message)
        self.env_index = env_index
        self.original_type = original_type
        self.remote_traceback = remote_traceback


def _preview(action: str) -> str:
    return repr(action if len(action) <= _ACTION_PREVIEW else action[:_ACTION_PREVIEW] + "...")


class _Failure:
    """What a worker sends back instead of results when one of its envs raised."""

    def __init__(self, env_index: int, what: str, exc: BaseException):
        self.env_index = env_index
        self.what = what
        self.type_name = type(exc).__name__
        self.message = str(exc)
        self.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    def error(self, worker: int) -> EnvError:
        return EnvError(
            f"environment {self.env_index} (Ray worker {worker}) raised {self.type_name} in {self.what}: "
            f"{self.message}\n--- remote traceback ---\n{self.traceback.rstrip()}",
            env_index=self.env_index,
            original_type=self.type_name,
            remote_traceback=self.traceback,
        )


class EnvWorker:
    """The actor body: a list of environments and their global indices in the rollout."""

    def __init__(self) -> None:
        self.envs: list[Any] = []
        self.env_indices: list[int] = []

    def start(
        self, env_indices: list[int], factories: list[EnvFactory], seeds: list[int | None]
    ) -> list[tuple[Observation, str]] | _Failure:
        self.envs, self.env_indices = [], list(env_indices)
        out = []
        for index, make, seed in zip(env_indices, factories, seeds):
            try:
                env = make()
            except Exception as exc:  # noqa: BLE001 - reported to the trainer with the env index
                return _Failure(index, "its factory", exc)
            self.envs.append(env)
            try:
                out.append((env.reset(seed), instructions_of(env)))
            except Exception as exc:  # noqa: BLE001
                return _Failure(index, f"reset(seed={seed!r})", exc)
        return out

    def step(self, pairs: list[tuple[int, str]]) -> list[StepResult] | _Failure:
        out = []
        for local, action in pairs:
            try:
                out.append(self.envs[local].step(action))
            except Exception as exc:  # noqa: BLE001
                return _Failure(self.env_indices[local], f"step({_preview(action)})", exc)
        return out


class RayEnvPool:
    """An :class:`~grouprl.rollout.env_pool.EnvPool` whose environments live in ``num_workers``
    Ray actors (round-robin: env ``i`` on worker ``i % num_workers``). See the module docstring."""

    def __init__(self, num_workers: int, address: str | None = None, *, num_cpus: float = 0.0):
        if num_workers < 1:
            raise ValueError(f"RayEnvPool: num_workers must be at least 1, got {num_workers}")
        import ray

        self._ray = ray
        if not ray.is_initialized():
            if address is not None:
                ray.init(address=address, ignore_reinit_error=True)
            else:
                ray.init(
                    include_dashboard=False,
                    object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                    log_to_driver=False,
                    ignore_reinit_error=True,
                )
        actor = ray.remote(num_cpus=num_cpus, scheduling_strategy="SPREAD", max_restarts=0)(EnvWorker)
        self.num_workers = num_workers
        # actor handles: Ray's types do not model ``handle.method.remote(...)``, so they stay Any
        self.workers: list[Any] = [actor.remote() for _ in range(num_workers)]
        self.num_envs = 0

    def _check_open(self, what: str) -> None:
        if not self.workers:
            raise RuntimeError(f"RayEnvPool.{what}: the pool is closed (its actors were killed)")

    # --- index layout -------------------------------------------------------------------------
    def _place(self, env_index: int) -> tuple[int, int]:
        """(worker, local index) of env ``env_index``."""
        return env_index % self.num_workers, env_index // self.num_workers

    def _envs_of(self, worker: int) -> list[int]:
        return list(range(worker, self.num_envs, self.num_workers))

    def _gather(self, refs: dict[int, Any], what: str) -> dict[int, Any]:
        """``ray.get`` every worker's call at once; env failures and dead workers as EnvError."""
        workers = list(refs)
        try:
            values = self._ray.get([refs[w] for w in workers])
        except self._ray.exceptions.RayError as exc:
            worker = next((w for w in workers if _failed(self._ray, refs[w])), None)
            where = f"Ray worker {worker} (envs {self._envs_of(worker)})" if worker is not None else "a Ray worker"
            message = _describe(self._ray, exc)
            if "No module named" in message:
                message += _IMPORT_HINT
            raise EnvError(f"{where} failed during {what}: {message}") from exc
        failures = [(w, v) for w, v in zip(workers, values) if isinstance(v, _Failure)]
        if failures:
            worker, failure = min(failures, key=lambda wf: wf[1].env_index)
            raise failure.error(worker)
        return dict(zip(workers, values))

    # --- EnvPool protocol ---------------------------------------------------------------------
    def start(self, factories: list[EnvFactory], seeds: list[int | None]) -> tuple[list[Observation], list[str]]:
        if len(factories) != len(seeds):
            raise ValueError(f"RayEnvPool.start: {len(factories)} factories but {len(seeds)} seeds")
        self._check_open("start")
        self.num_envs = len(factories)
        refs = {}
        for w, worker in enumerate(self.workers):
            indices = self._envs_of(w)
            if not indices:
                continue
            try:
                refs[w] = worker.start.remote(indices, [factories[i] for i in indices], [seeds[i] for i in indices])
            except Exception as exc:  # pickling a factory fails before anything runs remotely
                raise EnvError(
                    f"the factories of envs {indices} (Ray worker {w}) could not be sent to Ray: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        results = self._gather(refs, "start")
        observations: list[Observation] = [None] * self.num_envs  # type: ignore[list-item]
        instructions: list[str] = [""] * self.num_envs
        for w, pairs in results.items():
            for i, (obs, text) in zip(self._envs_of(w), pairs):
                observations[i], instructions[i] = obs, text
        return observations, instructions

    def step(self, indices: list[int], actions: list[str]) -> list[StepResult]:
        if len(indices) != len(actions):
            raise ValueError(f"RayEnvPool.step: {len(indices)} indices but {len(actions)} actions")
        self._check_open("step")
        pairs: dict[int, list[tuple[int, str]]] = {}
        positions: dict[int, list[int]] = {}
        for j, (i, action) in enumerate(zip(indices, actions)):
            if not 0 <= i < self.num_envs:
                raise IndexError(f"RayEnvPool.step: env index {i} out of range (the pool holds {self.num_envs} envs)")
            w, local = self._place(i)
            pairs.setdefault(w, []).append((local, action))
            positions.setdefault(w, []).append(j)
        refs = {w: self.workers[w].step.remote(p) for w, p in pairs.items()}
        results: list[StepResult] = [None] * len(indices)  # type: ignore[list-item]
        for w, values in self._gather(refs, "step").items():
            for j, value in zip(positions[w], values):
                results[j] = value
        return results

    def close(self) -> None:
        """Kill the actors (the Ray cluster stays up; see the module docstring)."""
        workers, self.workers, self.num_envs = self.workers, [], 0
        if not self._ray.is_initialized():
            return
        for worker in workers:
            with contextlib.suppress(Exception):  # already dead
                self._ray.kill(worker)


def _failed(ray, ref) -> bool:
    """The object ``ref`` is ready and holds an error."""
    ready, _ = ray.wait([ref], timeout=0)
    if not ready:
        return False
    try:
        ray.get(ref, timeout=0)
    except ray.exceptions.RayError:
        return True
    return False


def _describe(ray, exc: BaseException) -> str:
    """The error's own type and message, not Ray's wrapper (a RayTaskError's ``cause``)."""
    if isinstance(exc, ray.exceptions.RayTaskError) and getattr(exc, "cause", None) is not None:
        exc = exc.cause
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
