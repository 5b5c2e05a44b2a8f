"""The fault matrix from Python (the Rust ``pool/tests/faults.rs``): an env
that aborts its worker process, a slow step, and a slow or hung env among
sixteen whose neighbours' results must arrive while it is still inside its
step. Every env is a counter, and every result is checked against its
count."""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from helpers import (
    FAULTY,
    PATIENCE,
    Release,
    actions,
    attempt,
    counts_of,
    envs_of,
    faulty_kwargs,
    item,
    reaped,
    wait_until,
)

import rlpool

pytestmark = pytest.mark.timeout(90)

# The step (from 1) at which the faulty env fails or stalls.
FAULT_AT = 3
MANY = 16


@contextmanager
def no_core_dumps() -> Iterator[None]:
    """No core file from a worker that aborts (workers inherit the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))


def step_round(pool, envs):
    """Sends a step of 1 to ``envs`` and receives until each has one
    outcome: ``({env: count}, [errors])``."""
    pool.async_step_send(actions([1] * len(envs)), env_index=list(envs))
    counts: dict[int, int] = {}
    errors = []
    while len(counts) + len(errors) < len(envs):
        batch, err = attempt(pool.async_step_recv, max_get=len(envs), timeout=PATIENCE)
        if err is not None:
            errors.append(err)
            continue
        for env, count in zip(envs_of(batch), counts_of(batch)):
            assert env not in counts, f"env {env} twice"
            counts[env] = count
    return counts, errors


def test_an_env_that_aborts_its_worker(pools, proc_config):
    """Env 0 aborts its worker process in its third step: its worker's envs
    (0 and 1) raise ``WorkerDied`` naming the worker, its envs and the
    signal, and keep doing so; the other worker's envs count every step;
    shutdown reaps everyone."""
    with no_core_dumps():
        pool = pools(
            [FAULTY] * 4,
            create_env_kwargs=[faulty_kwargs(FAULT_AT, "abort"), {}, {}, {}],
            **proc_config.options(envs_per_worker=2),
        )
        pool.reset()
        pids = pool.worker_pids
        for r in range(1, FAULT_AT):
            counts, errors = step_round(pool, range(4))
            assert errors == []
            assert counts == {0: r, 1: r, 2: r, 3: r}
        counts, errors = step_round(pool, range(4))
        assert counts.get(2) == counts.get(3) == FAULT_AT
        assert 0 not in counts
        assert errors, "no error in the fault's round"
        for err in errors:
            assert isinstance(err, rlpool.WorkerDied), repr(err)
            assert (err.worker, err.envs) == (0, [0, 1])
            assert "6" in err.reason, err.reason
        # Env 1 may have answered before its worker died.
        assert len(errors) + (1 in counts) == 2
        for _ in range(2):
            counts, errors = step_round(pool, [1, 2, 3])
            assert sorted(counts) == [2, 3]
            assert [type(e) for e in errors] == [rlpool.WorkerDied]
        pool.shutdown()
        assert wait_until(lambda: all(reaped(pid) for pid in pids), 5.0)


def test_a_slow_step(make_pool):
    """Env 0's third step takes ten times the others' (20 ms, the others
    2 ms): no error, its result comes later, every count is right."""
    kwargs = [faulty_kwargs(FAULT_AT, "slow", step_us=2_000)] + [{"step_us": 2_000}] * 3
    pool = make_pool([FAULTY] * 4, create_env_kwargs=kwargs)
    pool.reset()
    for r in range(1, 6):
        counts, errors = step_round(pool, range(4))
        assert errors == []
        assert counts == {0: r, 1: r, 2: r, 3: r}


def workers_of_eight(config):
    """Two threads, or two worker processes of eight envs."""
    return {"envs_per_worker": MANY // 2} if config.procs else {"num_threads": 2}


@pytest.mark.parametrize("slow", [0, 3])
def test_a_slow_env_among_16(pools, config, tmp_path, slow):
    """One env among sixteen stalls in its third step until the test
    releases it (first in its worker's block of envs, or fourth): the other
    fifteen results of that round arrive while it is still inside its step;
    then it is released, its result comes, and every count is right."""
    with Release(tmp_path) as release:
        kwargs = [{} for _ in range(MANY)]
        kwargs[slow] = release.kwargs(fail_at=FAULT_AT, hold_ms=30_000)
        pool = pools(
            [FAULTY] * MANY, create_env_kwargs=kwargs, **config.options(**workers_of_eight(config))
        )
        pool.reset()
        for r in range(1, FAULT_AT):
            assert counts_of(pool.step(actions([1] * MANY))) == [r] * MANY
        pool.async_step_send(actions([1] * MANY))
        others = pool.async_step_recv(min_get=MANY - 1, max_get=MANY - 1, timeout=PATIENCE)
        assert envs_of(others) == [e for e in range(MANY) if e != slow]
        assert counts_of(others) == [FAULT_AT] * (MANY - 1)
        assert pool.in_flight() == [slow], "the held env is still inside its step"
        release.release()
        out = pool.async_step_recv(env_index=slow, timeout=PATIENCE)
        assert item(out, ("next", "observation")) == FAULT_AT
        for r in range(FAULT_AT + 1, FAULT_AT + 3):
            assert counts_of(pool.step(actions([1] * MANY))) == [r] * MANY


def test_a_hung_env_among_16(pools, config, tmp_path):
    """One env among sixteen hangs in its third step: the other fifteen
    results arrive, a receive of the hung env with a timeout raises
    ``Timeout`` naming it, the others go on stepping, and shutdown returns
    within its grace (threads leave the stuck thread behind until its
    hold ends; processes kill the worker)."""
    with Release(tmp_path) as release:
        kwargs = [{} for _ in range(MANY)]
        if config.procs:
            kwargs[0] = faulty_kwargs(FAULT_AT, "hang")
        else:
            # A thread cannot be killed: the "hang" ends by itself soon
            # after the test.
            kwargs[0] = release.kwargs(fail_at=FAULT_AT, hold_ms=4_000)
        pool = pools(
            [FAULTY] * MANY, create_env_kwargs=kwargs, **config.options(**workers_of_eight(config))
        )
        pool.reset()
        for _ in range(1, FAULT_AT):
            pool.step(actions([1] * MANY))
        pool.async_step_send(actions([1] * MANY))
        others = pool.async_step_recv(min_get=MANY - 1, max_get=MANY - 1, timeout=PATIENCE)
        assert envs_of(others) == list(range(1, MANY))
        called = time.monotonic()
        with pytest.raises(rlpool.Timeout) as info:
            pool.async_step_recv(env_index=0, timeout=0.05)
        assert time.monotonic() - called < 5.0
        assert (info.value.env, info.value.op) == (0, "step")
        rest = list(range(1, MANY))
        for r in range(FAULT_AT + 1, FAULT_AT + 3):
            pool.async_step_send(actions([1] * len(rest)), env_index=rest)
            batch = pool.async_step_recv(min_get=len(rest), max_get=len(rest), timeout=PATIENCE)
            assert counts_of(batch) == [r] * len(rest)
        assert pool.in_flight() == [0]
        pids = pool.worker_pids
        start = time.monotonic()
        pool.shutdown()
        assert time.monotonic() - start < 6.0
        assert wait_until(lambda: all(reaped(pid) for pid in pids), 5.0)
