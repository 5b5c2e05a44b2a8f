"""Node b's processes killed while its envs' results are in flight: the
error names the actor and its envs, node a's envs go on, nothing of node b
is left (no actor, no rlpool worker, no shared memory), and ``shutdown``
keeps its deadline. And an actor that falls silent (stopped) is declared
dead past the liveness timeout, and killed with its workers."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
from conftest import ON_A, ON_B, Cluster, alive, rlpool_shm
from helpers import PATIENCE, envs_of

import rlpool
import rlpool.ray

# Node a's envs step in a millisecond, node b's in ten seconds: node b's
# results are in flight when it is killed.
FAST_US, SLOW_US = 1_000, 10_000_000


def zeros(n: int) -> dict[str, np.ndarray]:
    return {"action": np.zeros((n, 1), dtype=np.int64)}


def fast_on_a_slow_on_b(per_node: int, **options: object) -> rlpool.ray.AsyncEnvPool:
    """``per_node`` fast LatencyEnvs on node a's actor and as many slow ones
    on node b's, in worker processes of two envs each."""
    kwargs = [{"step_us": FAST_US, "mode": "sleep"}] * per_node + [
        {"step_us": SLOW_US, "mode": "sleep"}
    ] * per_node
    return rlpool.ray.AsyncEnvPool(
        ["LatencyEnv"] * (2 * per_node),
        num_actors=2,
        actor_options=[ON_A, ON_B],
        backend="multiprocessing",
        envs_per_worker=2,
        create_env_kwargs=kwargs,
        **options,
    )


def test_a_lost_node_is_an_error_naming_its_actor_and_envs(ray_cluster: Cluster) -> None:
    pool = fast_on_a_slow_on_b(4, exchange="shm")
    try:
        info = pool.actor_info
        b_pids = [info[1]["pid"], *info[1]["worker_pids"]]
        assert len(b_pids) == 3
        assert all(alive(p) for p in b_pids)
        pool.reset()
        pool.async_step_send(zeros(8))
        first = pool.async_step_recv(min_get=4, max_get=4, timeout=PATIENCE)
        assert envs_of(first) == [0, 1, 2, 3]

        # Node a's envs sent again, node b's still stepping: kill node b.
        pool.async_step_send(zeros(4), env_index=[0, 1, 2, 3])
        killed = time.monotonic()
        ray_cluster.nodes["node_b"].kill()
        got: list[int] = []
        error = None
        while error is None:
            try:
                got += envs_of(pool.async_step_recv(min_get=1, timeout=10.0))
            except rlpool.ActorDied as err:
                error = err
        noticed = time.monotonic() - killed
        print(f"the dead actor was reported {noticed:.2f} s after the kill")
        assert isinstance(error, rlpool.WorkerDied)
        assert error.actor == 1
        assert error.worker == 1
        assert error.envs == [4, 5, 6, 7]
        assert error.lost == [4, 5, 6, 7]
        assert "actor 1 (envs 4..7" in str(error)
        assert "[4, 5, 6, 7]" in str(error)

        # Node a's envs go on.
        rest = pool.async_step_recv(min_get=4 - len(got), timeout=PATIENCE)
        assert sorted(got + envs_of(rest)) == [0, 1, 2, 3]
        pool.async_step_send(zeros(4), env_index=[0, 1, 2, 3])
        assert envs_of(pool.async_step_recv(min_get=4, timeout=PATIENCE)) == [0, 1, 2, 3]
        # Node b's envs are refused, by the same error.
        with pytest.raises(rlpool.ActorDied) as refused:
            pool.async_step_send(zeros(1), env_index=[5])
        assert refused.value.actor == 1
        assert refused.value.lost == []
        assert pool.in_flight() == []

        # Nothing of node b is left: no actor, no worker, no shared memory.
        deadline = time.monotonic() + 10
        while any(alive(p) for p in b_pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in b_pids if alive(p)]
        assert not ray_cluster.nodes["node_b"].pids()
        assert not rlpool_shm()
    finally:
        start = time.monotonic()
        pool.shutdown(timeout=3.0)
        took = time.monotonic() - start
    assert took < 5.0, f"shutdown(timeout=3.0) took {took:.1f} s"


def test_a_silent_actor_is_declared_dead_and_killed(ray_cluster: Cluster) -> None:
    pool = fast_on_a_slow_on_b(2)
    try:
        info = pool.actor_info
        b_pids = [info[1]["pid"], *info[1]["worker_pids"]]
        pool.reset()
        # Sent, then silent while its envs step.
        pool.async_step_send(zeros(4))
        os.kill(info[1]["pid"], signal.SIGSTOP)
        stopped = time.monotonic()
        got: list[int] = []

        def receive_until_the_error() -> None:
            while True:
                got.extend(envs_of(pool.async_step_recv(min_get=1, timeout=10.0)))

        with pytest.raises(rlpool.ActorDied) as died:
            receive_until_the_error()
        print(
            f"the silent actor was declared dead {time.monotonic() - stopped:.2f} s after SIGSTOP"
        )
        assert died.value.actor == 1
        assert died.value.lost == [2, 3]
        assert "no answer" in died.value.reason
        # Node a's results, kept while the error was raised.
        if len(got) < 2:
            got += envs_of(pool.async_step_recv(min_get=2 - len(got), timeout=PATIENCE))
        assert sorted(got) == [0, 1]
        # Declared dead, it is killed (a stopped process dies of SIGKILL).
        deadline = time.monotonic() + 20
        while any(alive(p) for p in b_pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in b_pids if alive(p)]
        pool.async_step_send(zeros(2), env_index=[0, 1])
        assert envs_of(pool.async_step_recv(min_get=2, timeout=PATIENCE)) == [0, 1]
    finally:
        for pid in b_pids:
            if alive(pid):
                os.kill(pid, signal.SIGCONT)
        pool.shutdown(timeout=3.0)
