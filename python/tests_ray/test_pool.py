"""``rlpool.ray.AsyncEnvPool`` on the two-node cluster: one actor per node,
every receive mode across the actors, the deadline rules, the busy guard,
env errors with global indices, statistics and the shutdown deadline."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import ON_A, ON_B, Cluster, alive
from helpers import (
    PATIENCE,
    actions,
    check_counts,
    counting_kwargs,
    envs_of,
    expected,
    pool_error,
    writable,
)

import rlpool
import rlpool.ray

N = 8
ALL = list(range(N))

CONFIGS = {
    "threading": {"backend": "threading", "num_threads": 2},
    "shm": {"backend": "multiprocessing", "exchange": "shm", "envs_per_worker": 2},
    "queue": {"backend": "multiprocessing", "exchange": "queue", "envs_per_worker": 4},
}


def make(envs: Any, config: str = "shm", **kwargs: Any) -> rlpool.ray.AsyncEnvPool:
    """A pool with one actor on each node."""
    options = {**CONFIGS[config], **kwargs}
    options.setdefault("actor_options", [ON_A, ON_B])
    options.setdefault("num_actors", 2)
    return rlpool.ray.AsyncEnvPool(envs, **options)


@pytest.fixture(params=sorted(CONFIGS))
def counters(request: pytest.FixtureRequest, ray_cluster: Cluster) -> Iterator[Any]:
    """Eight CountingEnvs on two actors, one per node, on each backend."""
    pool = make(["CountingEnv"] * N, request.param, create_env_kwargs=counting_kwargs(N))
    try:
        yield pool
    finally:
        workers = [pid for info in pool.actor_info for pid in info["worker_pids"]]
        actors = [info["pid"] for info in pool.actor_info]
        pool.shutdown(timeout=10.0)
    # The actors and their pools' workers are gone (or going: Ray reaps).
    deadline = time.monotonic() + 20
    while any(alive(p) for p in workers + actors) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in workers + actors if alive(p)]


def test_one_actor_per_node(counters: Any) -> None:
    import ray

    nodes = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
    info = counters.actor_info
    assert "node_a" in nodes[info[0]["node_id"]]["Resources"]
    assert "node_b" in nodes[info[1]["node_id"]]["Resources"]
    assert counters.actor_envs(0) == [0, 1, 2, 3]
    assert counters.actor_envs(1) == [4, 5, 6, 7]
    assert counters.actor_of(5) == 1
    if counters.actor_info[0]["backend"] == "multiprocessing":
        assert all(info["worker_pids"] for info in counters.actor_info)


def test_synchronous_calls(counters: Any) -> None:
    root = counters.reset()
    assert envs_of(root) == ALL
    assert [int(v) for v in root["observation"][:, 0]] == [100 * i for i in ALL]
    out = counters.step(actions(ALL))
    check_counts(out, dict.fromkeys(ALL, 1))
    assert writable(out)
    step, next_root = counters.step_and_maybe_reset(actions(ALL))
    check_counts(step, dict.fromkeys(ALL, 2))
    assert envs_of(next_root) == ALL
    rand = counters.rand_action()
    assert rand["action"].shape == (N, 1)


def test_first_k_then_the_rest(counters: Any) -> None:
    counters.reset()
    counters.async_step_send(actions(ALL))
    first = counters.async_step_recv(min_get=3, max_get=3, timeout=PATIENCE)
    assert len(envs_of(first)) == 3
    check_counts(first, dict.fromkeys(ALL, 1))
    rest = counters.async_step_recv(min_get=N - 3, timeout=PATIENCE)
    assert sorted(envs_of(first) + envs_of(rest)) == ALL
    check_counts(rest, dict.fromkeys(ALL, 1))
    assert counters.in_flight() == []


def test_a_batch_spans_the_actors(counters: Any) -> None:
    counters.reset()
    counters.async_step_send(actions(ALL))
    out = counters.async_step_recv(min_get=N, timeout=PATIENCE)
    assert envs_of(out) == ALL
    check_counts(out, dict.fromkeys(ALL, 1))
    # A send to some envs of each actor, by env_index entry.
    some = [1, 2, 5, 7]
    td = actions(some)
    td["env_index"] = np.asarray(some, dtype=np.int64)
    counters.async_step_send(td)
    out = counters.async_step_recv(min_get=4, timeout=PATIENCE)
    steps = dict.fromkeys(ALL, 1) | dict.fromkeys(some, 2)
    assert envs_of(out) == some
    check_counts(out, steps)


def test_asynchronous_loop_keeps_every_count(counters: Any) -> None:
    counters.reset()
    steps = dict.fromkeys(ALL, 0)
    counters.async_step_send(actions(ALL))
    for _ in range(30):
        out = counters.async_step_recv(min_get=2, max_get=4, timeout=PATIENCE)
        envs = envs_of(out)
        assert 2 <= len(envs) <= 4
        for env in envs:
            steps[env] += 1
        check_counts(out, steps)
        counters.async_step_send(actions(envs), env_index=envs)
    rest = counters.async_step_recv(min_get=len(counters.in_flight()), timeout=PATIENCE)
    for env in envs_of(rest):
        steps[env] += 1
    check_counts(rest, steps)


def test_poll_and_per_env_receive(counters: Any) -> None:
    counters.reset()
    counters.async_step_send(actions([0, 4]), env_index=[0, 4])
    # One env sent alone: only a receive of that env takes it.
    counters.async_step_send(actions([6])[0], env_index=6)
    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            out = counters.async_step_recv(min_get=2, timeout=0)
            break
        except rlpool.Timeout:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert envs_of(out) == [0, 4]
    err = pool_error(counters.async_step_recv, min_get=1, timeout=0.2)
    assert isinstance(err, rlpool.InvalidArgument)
    one = counters.async_step_recv(env_index=6, timeout=PATIENCE)
    assert int(np.asarray(one["env_index"]).reshape(-1)[0]) == 6
    assert int(one["next", "observation"].reshape(-1)[0]) == expected(6, 1)
    # An env sent in a batch can be received alone too.
    counters.async_step_send(actions([3, 5]), env_index=[3, 5])
    time.sleep(0.2)
    five = counters.async_step_recv(env_index=5, timeout=PATIENCE)
    assert five.batch_size == ()
    assert int(np.asarray(five["env_index"]).reshape(-1)[0]) == 5
    assert int(five["next", "observation"].reshape(-1)[0]) == expected(5, 1)
    three = counters.async_step_recv(min_get=1, timeout=PATIENCE)
    assert envs_of(three) == [3]


def test_reset_and_step_and_maybe_reset_async(counters: Any) -> None:
    counters.async_reset_send()
    root = counters.async_reset_recv(min_get=N, timeout=PATIENCE)
    assert envs_of(root) == ALL
    counters.async_step_and_maybe_reset_send(actions(ALL))
    step, next_root = counters.async_step_and_maybe_reset_recv(
        min_get=5, max_get=5, timeout=PATIENCE
    )
    assert envs_of(step) == envs_of(next_root)
    check_counts(step, dict.fromkeys(ALL, 1))
    step, next_root = counters.async_step_and_maybe_reset_recv(min_get=3, timeout=PATIENCE)
    assert envs_of(step) == envs_of(next_root)


def test_busy_guard_and_argument_errors(counters: Any) -> None:
    counters.reset()
    counters.async_step_send(actions([1, 6]), env_index=[1, 6])
    err = pool_error(counters.async_step_send, actions([6, 7]), env_index=[6, 7])
    assert isinstance(err, rlpool.Busy)
    assert err.envs == [6]
    assert "6" in str(err)
    # The refused send sent nothing: env 7 is idle.
    assert counters.in_flight() == [1, 6]
    for kwargs, what in [
        ({"min_get": 0}, "min_get"),
        ({"min_get": 2, "max_get": 1}, "max_get"),
        ({"min_get": 1, "timeout": -1.0}, "timeout"),
        ({"min_get": 3}, "in flight"),
    ]:
        err = pool_error(counters.async_step_recv, **kwargs)
        assert isinstance(err, rlpool.InvalidArgument), kwargs
        assert what in str(err)
    err = pool_error(counters.async_step_send, actions([8]), env_index=[N])
    assert isinstance(err, rlpool.InvalidArgument)
    assert str(N) in str(err)
    err = pool_error(counters.step, actions(ALL))
    assert isinstance(err, rlpool.Busy)
    out = counters.async_step_recv(min_get=2, timeout=PATIENCE)
    assert envs_of(out) == [1, 6]


def test_a_wrong_input_is_the_actors_error_naming_it(counters: Any) -> None:
    counters.reset()
    bad = rlpool.TensorDict({"action": np.ones((2, 3), dtype=np.int64)}, batch_size=(2,))
    err = pool_error(counters.async_step_send, bad, env_index=[5, 6])
    assert isinstance(err, rlpool.InvalidArgument)
    assert "actor 1" in str(err)
    assert counters.in_flight() == []


def test_a_timeout_before_min_get_loses_nothing(ray_cluster: Cluster) -> None:
    kwargs = [{"step_us": 300_000, "mode": "sleep"}] * 4
    with make(["LatencyEnv"] * 4, create_env_kwargs=kwargs) as pool:
        pool.reset()
        pool.async_step_send({"action": np.zeros((4, 1), dtype=np.int64)})
        start = time.monotonic()
        err = pool_error(pool.async_step_recv, min_get=4, timeout=0.05)
        elapsed = time.monotonic() - start
        assert isinstance(err, rlpool.Timeout)
        assert isinstance(err, TimeoutError)
        assert err.min_get == 4
        assert err.timeout == 0.05
        assert elapsed < 0.3, f"the deadline bounds the whole call: {elapsed:.3f} s"
        out = pool.async_step_recv(min_get=4, timeout=PATIENCE)
        assert envs_of(out) == [0, 1, 2, 3]
        # With a deadline, a receive waits for max_get (or the deadline).
        pool.async_step_send({"action": np.zeros((4, 1), dtype=np.int64)})
        out = pool.async_step_recv(min_get=1, max_get=4, timeout=PATIENCE)
        assert envs_of(out) == [0, 1, 2, 3]


def test_results_beyond_max_get_stay(counters: Any) -> None:
    counters.reset()
    counters.async_step_send(actions(ALL))
    time.sleep(0.5)
    got: list[int] = []
    while len(got) < N:
        out = counters.async_step_recv(min_get=1, max_get=2, timeout=PATIENCE)
        assert 1 <= len(envs_of(out)) <= 2
        check_counts(out, dict.fromkeys(ALL, 1))
        got += envs_of(out)
    assert sorted(got) == ALL


def test_an_env_error_names_the_global_env(ray_cluster: Cluster) -> None:
    envs = ["CountingEnv"] * 3 + ["FaultyCounter"]
    kwargs: list[dict[str, Any]] = [
        *counting_kwargs(3),
        {"fail_at": 1, "fault": "error"},
    ]
    with make(envs, create_env_kwargs=kwargs) as pool:
        pool.reset()
        pool.async_step_send({"action": np.ones((4, 1), dtype=np.int64)})
        got: list[int] = []
        failed = None
        while len(got) + (failed is not None) < 4:
            try:
                got += envs_of(pool.async_step_recv(min_get=1, timeout=PATIENCE))
            except rlpool.EnvFailed as err:
                failed = err
        assert failed is not None
        assert failed.env == 3
        assert "actor 1" in str(failed)
        assert "env 3" in str(failed)
        assert "deliberate error at step 1" in str(failed)
        assert sorted(got) == [0, 1, 2]
        assert pool.in_flight() == []


def test_stats_per_actor_and_total(counters: Any) -> None:
    counters.reset()
    counters.stats(reset=True)
    for _ in range(3):
        counters.step(actions(ALL))
    stats = counters.stats()
    total = stats["total"]
    assert total["batches"] == 3
    assert total["items"] == 3 * N
    assert total["avg_batch_size"] == N
    assert [a["actor"] for a in stats["actors"]] == [0, 1]
    assert all(a["sends"] == 3 and a["results"] == 3 * 4 for a in stats["actors"])
    assert total["pumps"] >= 6


def test_shutdown_returns_within_its_deadline(ray_cluster: Cluster) -> None:
    kwargs = [{"step_us": 30_000_000, "mode": "sleep"}] * 2
    pool = make(["LatencyEnv"] * 2, config="threading", create_env_kwargs=kwargs)
    pool.reset()
    pool.async_step_send({"action": np.zeros((2, 1), dtype=np.int64)})
    start = time.monotonic()
    pool.shutdown(timeout=2.0)
    elapsed = time.monotonic() - start
    assert elapsed < 4.0, f"shutdown(timeout=2.0) took {elapsed:.1f} s"
    assert isinstance(pool_error(pool.async_step_recv), rlpool.ShutDown)
    pool.shutdown()


def test_a_pool_that_cannot_start_names_the_actor(ray_cluster: Cluster) -> None:
    envs = ["CountingEnv", "NoSuchEnv"]
    with pytest.raises(rlpool.StartError, match=r"actor 1 \(envs 1\.\.1"):
        make(envs)
