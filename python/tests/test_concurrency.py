"""Several Python threads on one pool: collectors that each drive their own
env, per-env receives from several threads at once (each gets its own
env's result, never another's), batch receives next to per-env sends,
two batch receivers sharing results, a batch receive whose ``min_get``
became unreachable, and a shutdown that wakes blocked receivers. Ported
from the Rust conformance suite, on every configuration."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from helpers import (
    PATIENCE,
    STARTS,
    action,
    actions,
    counts_of,
    envs_of,
    item,
    recv_all,
    rows,
    sleepers_kwargs,
)

import rlpool

pytestmark = pytest.mark.timeout(90)


def run_threads(bodies: list[Callable[[], Any]], patience: float = 60.0) -> list[Any]:
    """Runs each body in its own thread and returns their results; a body's
    exception fails the test, and so does a thread still running after
    ``patience`` seconds."""
    results: list[Any] = [None] * len(bodies)
    errors: list[BaseException] = []

    def run(i: int, body: Callable[[], Any]) -> None:
        try:
            results[i] = body()
        except BaseException as err:
            errors.append(err)

    threads = [
        threading.Thread(target=run, args=(i, body), daemon=True) for i, body in enumerate(bodies)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(patience)
        assert not thread.is_alive(), "deadlock? a thread did not finish"
    if errors:
        raise errors[0]
    return results


def test_collectors_drive_their_own_envs(counters):
    """Four threads each drive their own env (per-env send and receive):
    every result arrives once, to its own thread, one count above the
    last."""
    pool = counters
    steps = 200

    def collector(env: int) -> None:
        for step in range(1, steps + 1):
            pool.async_step_send(action(1), env_index=env)
            out = pool.async_step_recv(env_index=env, timeout=PATIENCE)
            assert item(out, "env_index") == env
            assert item(out, ("next", "observation")) == STARTS[env] + step, f"env {env}"

    run_threads([lambda env=env: collector(env) for env in range(4)])
    assert pool.in_flight() == []
    assert counts_of(pool.step(actions([0] * 4))) == [s + steps for s in STARTS]


def test_per_env_receive_takes_only_its_env(counters):
    """A per-env receive takes its own env's result only, also when the env
    was sent to in a batch and several threads receive at once."""
    pool = counters
    counts = list(STARTS)
    pool.async_step_send(actions([1, 2, 3, 4]))
    two = pool.async_step_recv(env_index=2, timeout=PATIENCE)
    assert item(two, "env_index") == 2
    assert item(two, ("next", "observation")) == STARTS[2] + 3
    assert item(two, "action") == 3, "env 2's row of the batch"
    with pytest.raises(rlpool.InvalidArgument, match="env 2 has no step in flight"):
        pool.async_step_recv(env_index=2)
    assert envs_of(recv_all(pool, 3)) == [0, 1, 3]
    counts = [c + i + 1 for i, c in enumerate(counts)]

    for _ in range(40):
        pool.async_step_send(actions([1] * 4))
        got = run_threads(
            [
                lambda env=env: pool.async_step_recv(env_index=env, timeout=PATIENCE)
                for env in range(4)
            ]
        )
        for env, out in enumerate(got):
            counts[env] += 1
            assert item(out, "env_index") == env
            assert item(out, ("next", "observation")) == counts[env]
    assert pool.in_flight() == []


def test_batch_receive_never_takes_a_per_env_send(counters):
    """A batch receive never takes the result of a per-env send (an int
    ``env_index``), nor counts it as in flight; also while another thread
    drives that env."""
    pool = counters
    for round_ in range(1, 11):
        pool.async_step_send(action(1), env_index=0)
        pool.async_step_send(actions([1, 1, 1]), env_index=[1, 2, 3])
        assert envs_of(recv_all(pool, 3)) == [1, 2, 3]
        for timeout in (None, 0):
            with pytest.raises(rlpool.InvalidArgument, match="only 0 envs are in flight"):
                pool.async_step_recv(timeout=timeout)
        own = pool.async_step_recv(env_index=0, timeout=PATIENCE)
        assert item(own, ("next", "observation")) == STARTS[0] + round_

    def driver() -> None:
        for step in range(1, 101):
            pool.async_step_send(action(1), env_index=0)
            out = pool.async_step_recv(env_index=0, timeout=PATIENCE)
            assert item(out, ("next", "observation")) == STARTS[0] + 10 + step

    def batcher() -> None:
        counts = [s + 10 for s in STARTS]
        for _ in range(100):
            pool.async_step_send(actions([1, 1, 1]), env_index=[1, 2, 3])
            left = 3
            while left:
                batch = pool.async_step_recv()
                for row, env in zip(rows(batch), envs_of(batch)):
                    assert env != 0, "a batch receive took a per-env send's result"
                    counts[env] += 1
                    assert item(row, ("next", "observation")) == counts[env]
                left -= len(batch)

    run_threads([driver, batcher])


def test_concurrent_batch_receivers_take_each_result_once(make_pool):
    """Two threads receiving batches of one operation at once share the
    results: each result is taken by exactly one of them. (They poll with a
    short timeout: a receive without one could wait for a result the other
    thread took.)"""
    n = 8
    pool = make_pool(["CountingEnv"] * n, create_env_kwargs={"max_steps": 1000})
    for round_ in range(1, 21):
        pool.async_step_send(actions([1] * n))
        seen = [0] * n
        lock = threading.Lock()

        def receiver(round_: int = round_, seen: list[int] = seen, lock: Any = lock) -> None:
            deadline = time.monotonic() + PATIENCE
            while True:
                with lock:
                    if sum(seen) >= n:
                        return
                assert time.monotonic() < deadline, "results missing"
                try:
                    batch = pool.async_step_recv(timeout=0.005)
                except (rlpool.Timeout, rlpool.InvalidArgument):
                    time.sleep(0)
                    continue
                with lock:
                    for env, count in zip(envs_of(batch), counts_of(batch)):
                        seen[env] += 1
                        assert count == round_

        run_threads([receiver, receiver])
        assert seen == [1] * n, f"round {round_}"


def test_a_batch_receive_whose_min_get_became_unreachable_fails(make_pool):
    """A batch receive (without a timeout) whose ``min_get`` can no longer
    be met, because another thread took one of its envs' results with a
    per-env receive while it waited, is ``InvalidArgument`` rather than a
    wait forever; nothing is lost."""
    pool = make_pool(
        ["LatencyEnv"] * 4, create_env_kwargs=sleepers_kwargs([0, 300_000, 300_000, 300_000])
    )
    pool.reset()
    pool.async_step_send(actions([0] * 4))
    outcome: list[Any] = []

    def batch() -> None:
        try:
            outcome.append(len(pool.async_step_recv(min_get=4)))
        except rlpool.PoolError as err:
            outcome.append(err)

    waiter = threading.Thread(target=batch, daemon=True)
    waiter.start()
    time.sleep(0.05)  # Let the batch receive start waiting.
    try:
        pool.async_step_recv(env_index=0, timeout=PATIENCE)
        took_env_0 = True
    except rlpool.InvalidArgument:
        took_env_0 = False  # The batch receive already took all four.
    waiter.join(PATIENCE)
    assert not waiter.is_alive(), "the batch receive waits for a result that cannot come"
    (result,) = outcome
    if took_env_0:
        assert isinstance(result, rlpool.InvalidArgument), result
        assert "cannot wait for 4 step results" in str(result)
        assert envs_of(recv_all(pool, 3)) == [1, 2, 3], "nothing lost"
    else:
        assert result == 4


def test_shutdown_wakes_blocked_receivers(make_pool):
    """Receives blocked without a timeout while another thread shuts the
    pool down return (a result published before, or ``ShutDown``) instead
    of waiting forever."""
    pool = make_pool(["LatencyEnv"] * 8, create_env_kwargs=sleepers_kwargs([50_000] * 8))
    pool.reset()
    pool.async_step_send(actions([0] * 7), env_index=list(range(7)))
    pool.async_step_send(action(0), env_index=7)
    errors: list[Any] = []

    def receive(call: Callable[[], Any]) -> None:
        try:
            call()
        except rlpool.ShutDown:
            pass
        except BaseException as err:
            errors.append(err)

    waiters = [
        threading.Thread(target=receive, args=(lambda: pool.async_step_recv(min_get=7),)),
        threading.Thread(target=receive, args=(lambda: pool.async_step_recv(env_index=7),)),
    ]
    for waiter in waiters:
        waiter.daemon = True
        waiter.start()
    time.sleep(0.01)
    pool.shutdown()
    for waiter in waiters:
        waiter.join(PATIENCE)
        assert not waiter.is_alive(), "a receive still waits after shutdown"
    assert errors == []
