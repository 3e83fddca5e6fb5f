"""RayEnvPool against a real local Ray cluster (started once for this module): the same
observations, rewards, done flags and infos as LocalEnvPool, envs in other processes, env
errors named by env index."""

from __future__ import annotations

import functools
import os
import random
import sys

import pytest

ray = pytest.importorskip("ray")

from grouprl.rollout.env_pool import LocalEnvPool, make_pool
from grouprl.rollout.ray_pool import EnvError, RayEnvPool
from grouprl.tasks.envs import GridWorld, Sokoban

# The workers cannot import this test module by name (pytest put tests/ on the driver's
# sys.path only): ship the env classes below by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

MOVES = ["up", "down", "left", "right", "<action>left</action>", "jump"]  # "jump" is invalid


class PidGridWorld(GridWorld):
    """GridWorld whose every step's info says which process ran it."""

    def step(self, action):
        result = super().step(action)
        result.info["pid"] = os.getpid()
        return result


class FailingGridWorld(GridWorld):
    """GridWorld that raises on the action "explode" (or at reset with ``fail_reset``)."""

    def __init__(self, fail_reset: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.fail_reset = fail_reset

    def reset(self, seed=None):
        if self.fail_reset:
            raise KeyError(f"no map for seed {seed}")
        return super().reset(seed)

    def step(self, action):
        if action == "explode":
            raise ValueError("the lake cracked")
        return super().step(action)


class ExitingGridWorld(GridWorld):
    """Kills its own worker process on the action "exit"."""

    def step(self, action):
        if action == "exit":
            os._exit(1)
        return super().step(action)


@pytest.fixture(scope="module")
def ray_cluster(ray_local):  # one real local cluster for the session (conftest)
    yield


@pytest.fixture(scope="module")
def ray_pool(ray_cluster):
    pool = RayEnvPool(2)
    yield pool
    pool.close()


def roll(pool, factories, seeds, n_steps, rng_seed):
    """Drive a pool the way the runner does: every step, all live envs' actions in one call.
    Returns everything the pool handed back."""
    rng = random.Random(rng_seed)
    observations, instructions = pool.start(factories, seeds)
    trace = [("start", observations, instructions)]
    live = list(range(len(factories)))
    for _ in range(n_steps):
        if not live:
            break
        rng.shuffle(live)  # the caller's order, not index order, must be kept
        actions = [rng.choice(MOVES) for _ in live]
        results = pool.step(live, actions)
        trace.append(("step", list(live), actions, results))
        live = [i for i, r in zip(live, results) if not r.done]
    return trace


@pytest.mark.parametrize(
    "factory, n_steps",
    [
        (functools.partial(GridWorld, size=4, slippery=0.3), 12),
        (functools.partial(Sokoban, size=6, boxes=1, max_steps=8), 10),
    ],
)
def test_same_results_as_local_pool(ray_pool, factory, n_steps):
    factories, seeds = [factory] * 7, [0, 0, 0, 1, 1, 2, None]  # 7 envs: uneven split over 2 workers
    local = roll(LocalEnvPool(), factories, seeds, n_steps, rng_seed=5)
    remote = roll(ray_pool, factories, seeds, n_steps, rng_seed=5)
    assert len(remote) == len(local) > 2
    for got, want in zip(remote, local):
        assert got == want  # whole dataclasses: observations, rewards, done flags, infos
    assert any(r.done for entry in local[1:] for r in entry[3])


def test_envs_run_in_worker_processes_round_robin(ray_pool):
    ray_pool.start([PidGridWorld] * 5, [0, 1, 2, 3, 4])
    results = ray_pool.step([4, 3, 2, 1, 0], ["up"] * 5)
    pids = [r.info["pid"] for r in results][::-1]  # back to env order 0..4
    assert os.getpid() not in pids
    assert len(set(pids)) == 2
    assert pids[0] == pids[2] == pids[4] != pids[1] == pids[3]  # env i on worker i % 2


def test_env_exception_names_env_index(ray_pool):
    ray_pool.start([FailingGridWorld] * 4, [0, 1, 2, 3])
    with pytest.raises(EnvError) as caught:
        ray_pool.step([0, 1, 2, 3], ["up", "down", "left", "explode"])
    message = str(caught.value)
    assert "environment 3" in message and "ValueError" in message and "the lake cracked" in message
    assert "step('explode')" in message
    assert caught.value.env_index == 3 and caught.value.original_type == "ValueError"
    assert 'raise ValueError("the lake cracked")' in caught.value.remote_traceback

    factories = [FailingGridWorld] * 3 + [functools.partial(FailingGridWorld, fail_reset=True)]
    with pytest.raises(EnvError, match=r"environment 3 .*KeyError in reset\(seed=7\).*no map for seed 7"):
        ray_pool.start(factories, [7] * 4)

    # An env error leaves the workers alive: the pool is usable for the next rollout.
    observations, _ = ray_pool.start([GridWorld] * 2, [0, 1])
    assert observations == LocalEnvPool().start([GridWorld] * 2, [0, 1])[0]


def test_dead_worker_is_named(ray_cluster):
    pool = RayEnvPool(2)
    try:
        pool.start([ExitingGridWorld] * 4, [0, 1, 2, 3])
        with pytest.raises(EnvError, match=r"Ray worker 1 \(envs \[1, 3\]\) failed during step"):
            pool.step([0, 1], ["up", "exit"])
    finally:
        pool.close()


def test_make_pool(ray_cluster):
    assert isinstance(make_pool(0), LocalEnvPool)
    assert isinstance(make_pool(1), LocalEnvPool)
    pool = make_pool(2)
    try:
        assert isinstance(pool, RayEnvPool) and len(pool.workers) == 2
    finally:
        pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.step([0], ["up"])
