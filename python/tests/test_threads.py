"""What only worker threads have: no worker process, no exchange and no
statistics, pinned worker threads, a synchronous step with a busy worker,
a held env that does not stop the others, and shutdown joining every
worker thread."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from helpers import FAULTY, PATIENCE, Release, actions, counts_of, envs_of, wait_until

import rlpool

pytestmark = pytest.mark.timeout(60)


def worker_threads() -> set[int]:
    """The ids of this process's threads named ``rlpool-worker*``."""
    found = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if f.read().startswith("rlpool-worker"):
                    found.add(int(task))
        except OSError:
            continue
    return found


def test_threads_have_no_processes_and_no_exchange(pools):
    """Threads share memory: no worker process, no exchange, no
    statistics."""
    pool = pools(["CountingEnv"] * 3)
    assert pool.backend == "threading"
    assert pool.worker_pids == []
    assert pool.resolved_exchange == "queue"
    assert pool.exchange_reason is None
    pool.step(actions([1] * 3))
    assert pool.stats() is None
    assert pool.stats(reset=True) is None


def test_worker_threads_are_pinned_to_their_cpus(pools):
    """Worker threads may be pinned: an env sees the CPU set of the thread
    that steps it, in this process; a bad set fails the start."""
    available = sorted(os.sched_getaffinity(0))
    first = available[0]
    pool = pools(["WhereAmI"] * 4, num_threads=1, worker_affinity=[[first]])
    for _ in range(3):
        obs = np.asarray(pool.reset()["observation"])
        assert obs.tolist() == [[1, first, os.getpid()]] * 4
    spread = [available[w % len(available)] for w in range(2)]
    pool = pools(["WhereAmI"] * 4, num_threads=2, worker_affinity=lambda w: [spread[w]])
    obs = np.asarray(pool.reset()["observation"])
    for env in obs.tolist():
        assert env[0] == 1, obs
        assert env[1] in spread, obs
    with pytest.raises(rlpool.StartError, match="1 CPU sets for 2 workers"):
        pools(["WhereAmI"] * 4, num_threads=2, worker_affinity=[[first]])


def test_a_synchronous_step_with_a_busy_worker_gives_every_result_in_order(pools, tmp_path):
    """With one worker thread held in env 0's step, a synchronous step
    still gives every env's result, in order."""
    with Release(tmp_path) as release:
        kwargs = [release.kwargs(fail_at=21, hold_ms=10_000)] + [{}] * 7
        pool = pools([FAULTY] * 8, num_threads=1, create_env_kwargs=kwargs)
        pool.reset()
        for _ in range(20):
            pool.step(actions([1] * 8))
        releaser = threading.Timer(0.1, release.release)
        releaser.start()
        out = pool.step(actions([1] * 8))
        releaser.join()
        assert envs_of(out) == list(range(8))
        assert counts_of(out) == [21] * 8


def test_a_held_env_does_not_stop_the_others(pools, tmp_path):
    """An env held in its step keeps one of two worker threads: the other
    envs go on, a receive of the held env times out, and shutdown returns
    within its grace (leaving the held thread behind)."""
    with Release(tmp_path) as release:
        kwargs = [release.kwargs(fail_at=1, hold_ms=4_000), {}, {}, {}]
        pool = pools([FAULTY] * 4, num_threads=2, create_env_kwargs=kwargs)
        pool.reset()
        pool.async_step_send(actions([1] * 4))
        batch = pool.async_step_recv(min_get=3, max_get=3, timeout=PATIENCE)
        assert envs_of(batch) == [1, 2, 3]
        for _ in range(5):
            pool.async_step_send(actions([1] * 3), env_index=[1, 2, 3])
            batch = pool.async_step_recv(min_get=3, max_get=3, timeout=PATIENCE)
            assert envs_of(batch) == [1, 2, 3]
        with pytest.raises(rlpool.Timeout) as info:
            pool.async_step_recv(env_index=0, timeout=0.05)
        assert info.value.env == 0
        start = time.monotonic()
        pool.shutdown()
        assert time.monotonic() - start < 5.0


def test_shutdown_and_drop_join_every_worker_thread():
    """Shutdown, on request or on drop (with envs stepping and results not
    received), joins the pool's worker threads."""
    before = worker_threads()
    pool = rlpool.AsyncEnvPool(
        ["LatencyEnv"] * 4,
        num_threads=3,
        create_env_kwargs={"step_us": 20_000, "mode": "sleep"},
    )
    assert wait_until(lambda: len(worker_threads() - before) == 3, 5.0), "3 worker threads"
    mine = worker_threads() - before
    pool.reset()
    pool.async_step_send(actions([0] * 4))
    del pool
    assert wait_until(lambda: not (worker_threads() & mine), 5.0), "threads left on drop"

    before = worker_threads()
    pool = rlpool.AsyncEnvPool(["CountingEnv"] * 4, num_threads=2)
    assert wait_until(lambda: len(worker_threads() - before) == 2, 5.0), "2 worker threads"
    mine = worker_threads() - before
    pool.async_reset_send()
    pool.shutdown()
    assert wait_until(lambda: not (worker_threads() & mine), 5.0), "threads left on shutdown"
    del pool
