"""Node b's processes killed while its envs' results are in flight: the
error names the actor and its envs, node a's envs go on, nothing of node b
is left (no actor, no rlpool worker, no shared memory), and ``shutdown``
keeps its deadline."""

from __future__ import annotations

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


def test_a_lost_node_is_an_error_naming_its_actor_and_envs(ray_cluster: Cluster) -> None:
    kwargs = [{"step_us": FAST_US, "mode": "sleep"}] * 4 + [
        {"step_us": SLOW_US, "mode": "sleep"}
    ] * 4
    pool = rlpool.ray.AsyncEnvPool(
        ["LatencyEnv"] * 8,
        num_actors=2,
        actor_options=[ON_A, ON_B],
        backend="multiprocessing",
        exchange="shm",
        envs_per_worker=2,
        create_env_kwargs=kwargs,
    )
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
