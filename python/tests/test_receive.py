"""Receives: the full batch, ``min_get``, ``max_get``, polls and deadlines
(a timeout bounds the whole call, ``0`` polls, a timeout before ``min_get``
raises :class:`rlpool.Timeout` and loses nothing), per-env receives, and
the receive arguments the pool refuses. Ported from the Rust conformance
suite (``pool/tests/common/conformance.rs``), on every configuration."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from helpers import (
    PATIENCE,
    STARTS,
    Release,
    action,
    actions,
    attempt,
    counts_of,
    envs_of,
    item,
    recv_all,
    rows,
    sleepers_kwargs,
)

import rlpool

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("min_get", [None, 1, 2])
def test_async_reset_and_step_with_min_get(stacked_counters, min_get):
    """Async resets then steps, receiving with ``min_get`` unset, 1 and 2:
    every batch has at least ``min_get`` results, is sorted, and each env's
    count goes up by exactly its actions; the received envs are sent to
    again through an ``"env_index"`` entry, a list or an array."""
    pool = stacked_counters
    n = pool.num_envs

    def receive(recv, in_flight):
        if min_get is None:
            return recv()
        return recv(min_get=min(min_get, in_flight))

    def least(in_flight):
        return min(min_get or 1, in_flight)

    pool.async_reset_send()
    counts: dict[int, int] = {}
    in_flight = n
    while in_flight:
        batch = receive(pool.async_reset_recv, in_flight)
        assert len(batch) >= least(in_flight)
        for row, env in zip(rows(batch), envs_of(batch)):
            assert env not in counts, f"env {env} reset twice"
            assert item(row, "observation") == STARTS[env]
            counts[env] = STARTS[env]
        in_flight -= len(batch)

    idle = list(range(n))
    for round_ in range(12):
        td = actions([1] * len(idle))
        how = round_ % 3
        if how == 0:
            td["env_index"] = np.array(idle, dtype=np.int64)
            pool.async_step_send(td)
        elif how == 1:
            pool.async_step_send(td, env_index=idle)
        else:
            pool.async_step_send(td, env_index=np.array(idle))
        in_flight += len(idle)
        batch = receive(pool.async_step_recv, in_flight)
        assert len(batch) >= least(in_flight)
        idle = envs_of(batch)
        for row, env in zip(rows(batch), idle):
            counts[env] += 1
            assert item(row, ("next", "observation")) == counts[env], f"env {env}"
            assert item(row, "action") == 1, "the row sent"
        in_flight -= len(batch)
    if in_flight:
        assert len(recv_all(pool, in_flight)) == in_flight
    assert pool.in_flight() == []


def test_poll_takes_at_most_one_result(counters):
    """``min_get=1, max_get=1, timeout=0`` polls: one result, or a
    ``Timeout`` with none ready that takes nothing; polling until every env
    answered gets each result exactly once."""
    pool = counters
    for round_ in range(1, 4):
        pool.async_step_send(actions([1] * 4))
        seen: set[int] = set()
        while len(seen) < 4:
            batch, err = attempt(pool.async_step_recv, min_get=1, max_get=1, timeout=0)
            if err is not None:
                assert isinstance(err, rlpool.Timeout), repr(err)
                assert isinstance(err, TimeoutError)
                assert (err.op, err.timeout, err.ready, err.min_get) == ("step", 0, 0, 1)
                time.sleep(0)
                continue
            assert len(batch) == 1, "max_get 1 caps the batch"
            (env,) = envs_of(batch)
            assert env not in seen, f"env {env} received twice"
            seen.add(env)
            assert counts_of(batch) == [STARTS[env] + round_]
    assert pool.in_flight() == []


def test_poll_with_nothing_ready_times_out(make_pool):
    """A poll with nothing ready is a ``Timeout`` (checked whenever the poll
    returned before the envs could have finished), and loses nothing."""
    step_us = 250_000
    pool = make_pool(["LatencyEnv"] * 2, create_env_kwargs=sleepers_kwargs([step_us] * 2))
    pool.reset()
    sent = time.monotonic()
    pool.async_step_send(actions([0, 0]))
    got = 0
    batch, err = attempt(pool.async_step_recv, max_get=1, timeout=0)
    if err is not None:
        assert isinstance(err, rlpool.Timeout), repr(err)
        assert (err.op, err.ready, err.min_get) == ("step", 0, 1)
    else:
        assert time.monotonic() - sent >= step_us / 1e6, "no env can have finished"
        got = len(batch)
    rest = recv_all(pool, 2 - got)
    assert len(rest) == 2 - got, "the timed-out poll took nothing"


def test_deadline_batch_of_three(counters):
    """``min_get=3, max_get=3, timeout=0.1`` on four envs: a batch of exactly
    three (a ``Timeout`` before three are ready takes nothing and is
    retried); the fourth comes with the next receive."""
    pool = counters
    for round_ in range(1, 4):
        pool.async_step_send(actions([1] * 4))
        while True:
            batch, err = attempt(pool.async_step_recv, min_get=3, max_get=3, timeout=0.1)
            if err is None:
                break
            assert isinstance(err, rlpool.Timeout), repr(err)
            assert err.min_get == 3
            assert err.ready < 3
        assert len(batch) == 3, "min_get = max_get = 3"
        rest = pool.async_step_recv(timeout=PATIENCE)
        assert len(rest) == 1
        assert sorted(envs_of(batch) + envs_of(rest)) == [0, 1, 2, 3], "each env once"
        for part in (batch, rest):
            for env, count in zip(envs_of(part), counts_of(part)):
                assert count == STARTS[env] + round_


def test_timeout_without_max_get_waits_for_every_env(make_pool):
    """With a timeout and no ``max_get``, a receive waits for every env in
    flight (or the deadline): a full batch, deterministically."""
    pool = make_pool(["CountingEnv"] * 6, create_env_kwargs={"max_steps": 1000})
    for round_ in range(1, 6):
        pool.async_step_send(actions([1] * 6))
        batch = pool.async_step_recv(timeout=PATIENCE)
        assert envs_of(batch) == list(range(6))
        assert counts_of(batch) == [round_] * 6


def test_deadline_returns_what_is_ready(make_pool):
    """At the deadline, a receive whose ``min_get`` is met returns what is
    ready: the fast envs, not the slow one; and not before its deadline,
    since more results were coming."""
    slow_us = 400_000
    timeout = 0.05
    pool = make_pool(["LatencyEnv"] * 4, create_env_kwargs=sleepers_kwargs([0, 0, slow_us, 0]))
    pool.reset()
    sent = time.monotonic()
    pool.async_step_send(actions([0] * 4))
    while True:
        called = time.monotonic()
        try:
            batch = pool.async_step_recv(min_get=2, timeout=timeout)
            break
        except rlpool.Timeout:
            continue  # A loaded machine may not have stepped two envs in 50 ms.
    waited = time.monotonic() - called
    got = envs_of(batch)
    if time.monotonic() - sent < slow_us / 1e6:
        assert 2 not in got, f"the slow env cannot be ready: {got}"
        assert waited >= timeout * 0.99, f"returned after {waited:.3f} s, before the deadline"
    if len(got) < 4:
        got += envs_of(recv_all(pool, 4 - len(got)))
    assert sorted(got) == [0, 1, 2, 3]


def test_a_timeout_bounds_the_whole_call(make_pool, tmp_path):
    """A receive's timeout bounds the call, also when results keep coming
    in: with env 0 held, ``timeout=0.2`` returns the others (or a Timeout)
    after about 0.2 s, never after the held env; ``timeout=0`` returns at
    once."""
    with Release(tmp_path) as release:
        kwargs = [release.kwargs(fail_at=1, hold_ms=15_000), {}, {}]
        pool = make_pool(["FaultyCounter"] * 3, create_env_kwargs=kwargs)
        pool.reset()
        pool.async_step_send(actions([1] * 3))
        called = time.monotonic()
        try:
            got = envs_of(pool.async_step_recv(min_get=1, timeout=0.2))
        except rlpool.Timeout:
            got = []  # A loaded machine: neither quick env stepped yet.
        waited = time.monotonic() - called
        assert 0 not in got, "the held env cannot be ready"
        assert 0.2 * 0.99 <= waited < 5.0, f"{waited:.3f} s"
        for env in {1, 2} - set(got):
            pool.async_step_recv(env_index=env, timeout=PATIENCE)
        called = time.monotonic()
        with pytest.raises(rlpool.Timeout) as info:
            pool.async_step_recv(timeout=0)
        assert time.monotonic() - called < 1.0
        assert info.value.ready == 0
        called = time.monotonic()
        with pytest.raises(rlpool.Timeout):
            pool.async_step_recv(env_index=0, timeout=0.1)
        assert 0.1 * 0.99 <= time.monotonic() - called < 5.0
        release.release()
        out = pool.async_step_recv(env_index=0, timeout=PATIENCE)
        assert item(out, ("next", "observation")) == 1


def test_max_get_below_min_get_is_rejected(counters):
    """``max_get < min_get`` is refused by every batch receive and takes
    nothing; ``max_get == min_get`` is fine."""
    pool = counters
    pool.async_reset_send()
    with pytest.raises(rlpool.InvalidArgument) as info:
        pool.async_reset_recv(min_get=3, max_get=2)
    assert isinstance(info.value, ValueError)
    assert "max_get (2) must be at least min_get (3)" in str(info.value)
    assert len(recv_all(pool, 4, "reset")) == 4
    pool.async_step_send(actions([1] * 4))
    with pytest.raises(rlpool.InvalidArgument, match=r"max_get \(2\)"):
        pool.async_step_recv(min_get=3, max_get=2)
    assert len(recv_all(pool, 4)) == 4
    pool.async_step_and_maybe_reset_send(actions([1] * 4))
    with pytest.raises(rlpool.InvalidArgument, match=r"max_get \(2\)"):
        pool.async_step_and_maybe_reset_recv(min_get=3, max_get=2)
    step, root = recv_all(pool, 4, "step_and_maybe_reset")
    assert (len(step), len(root)) == (4, 4)
    pool.async_step_send(actions([1] * 4))
    assert len(pool.async_step_recv(min_get=2, max_get=2)) == 2
    assert len(recv_all(pool, 2)) == 2


def test_bad_receive_arguments(counters):
    """``min_get`` below 1, ``min_get`` above what is in flight for the
    operation, a receive with nothing in flight, a negative or NaN timeout
    and negative counts are ``InvalidArgument`` (a ``ValueError``) and take
    nothing; counts that are not ints are a ``TypeError``."""
    pool = counters
    for recv in (
        pool.async_step_recv,
        pool.async_reset_recv,
        pool.async_step_and_maybe_reset_recv,
    ):
        with pytest.raises(rlpool.InvalidArgument, match="min_get must be at least 1, got 0"):
            recv(min_get=0)
    for timeout in (None, 0):
        with pytest.raises(rlpool.InvalidArgument) as info:
            pool.async_step_recv(timeout=timeout)
        assert "only 0 envs are in flight for step" in str(info.value)
        with pytest.raises(rlpool.InvalidArgument, match="in flight for reset"):
            pool.async_reset_recv(timeout=timeout)
        with pytest.raises(rlpool.InvalidArgument, match="in flight for step_and_maybe_reset"):
            pool.async_step_and_maybe_reset_recv(timeout=timeout)
    # A deadline too far to represent, with nothing in flight.
    with pytest.raises(rlpool.InvalidArgument):
        pool.async_step_recv(timeout=1e30)

    pool.async_step_send(actions([1, 1]), env_index=[0, 1])
    with pytest.raises(rlpool.InvalidArgument) as info:
        pool.async_step_recv(min_get=3)
    assert "cannot wait for 3 step results: only 2 envs are in flight for step" in str(info.value)
    with pytest.raises(rlpool.InvalidArgument, match="only 0 envs are in flight for reset"):
        pool.async_reset_recv()
    with pytest.raises(rlpool.InvalidArgument, match="min_get"):
        pool.async_step_recv(min_get=0)
    for bad in (-1.0, -1e-9, math.nan):
        with pytest.raises(rlpool.InvalidArgument, match="timeout"):
            pool.async_step_recv(timeout=bad)
        with pytest.raises(rlpool.InvalidArgument, match="timeout"):
            pool.async_step_recv(env_index=0, timeout=bad)
    with pytest.raises(rlpool.InvalidArgument):
        pool.async_step_recv(min_get=-1)
    with pytest.raises(rlpool.InvalidArgument):
        pool.async_step_recv(min_get=1, max_get=-1)
    with pytest.raises(TypeError):
        pool.async_step_recv(min_get="2")
    with pytest.raises(TypeError):
        pool.async_step_recv(timeout="soon")
    assert pool.in_flight() == [0, 1]
    assert envs_of(recv_all(pool, 2)) == [0, 1], "nothing was taken"


def test_per_env_receive_of_an_idle_env_is_an_error(counters):
    """A per-env receive of an env with nothing in flight for that
    operation is ``InvalidArgument``."""
    pool = counters
    with pytest.raises(rlpool.InvalidArgument) as info:
        pool.async_step_recv(env_index=0)
    assert "env 0 has no step in flight" in str(info.value)
    with pytest.raises(rlpool.InvalidArgument, match="env 1 has no reset in flight"):
        pool.async_reset_recv(env_index=1)
    with pytest.raises(rlpool.InvalidArgument, match="env 2 has no step_and_maybe_reset in flight"):
        pool.async_step_and_maybe_reset_recv(env_index=2)
    # In flight for another operation.
    pool.async_step_send(action(1), env_index=0)
    with pytest.raises(rlpool.InvalidArgument, match="env 0 has no reset in flight"):
        pool.async_reset_recv(env_index=0)
    with pytest.raises(rlpool.InvalidArgument, match="env 0"):
        pool.async_step_and_maybe_reset_recv(env_index=0, timeout=0)
    out = pool.async_step_recv(env_index=0, timeout=PATIENCE)
    assert item(out, ("next", "observation")) == STARTS[0] + 1


def test_per_env_timeout_keeps_the_result(make_pool):
    """A per-env receive that times out is a ``Timeout`` naming the env
    that takes nothing: the result comes with a later receive. A per-env
    poll of a finished env returns it."""
    step_us = 300_000
    timeout = 0.02
    pool = make_pool(["LatencyEnv"] * 2, create_env_kwargs=sleepers_kwargs([step_us, 0]))
    pool.reset()
    sent = time.monotonic()
    pool.async_step_send(action(0), env_index=0)
    called = time.monotonic()
    out, err = attempt(pool.async_step_recv, env_index=0, timeout=timeout)
    waited = time.monotonic() - called
    if err is None:
        assert time.monotonic() - sent >= step_us / 1e6, "env 0 cannot have finished"
    else:
        assert isinstance(err, rlpool.Timeout), repr(err)
        assert (err.op, err.env) == ("step", 0)
        assert err.timeout == pytest.approx(timeout)
        assert waited >= timeout * 0.99, f"waited {waited:.3f} s, less than the timeout"
        assert "its result stays" in str(err)
        out = pool.async_step_recv(env_index=0, timeout=PATIENCE)
    assert item(out, "env_index") == 0
    pool.async_step_send(action(0), env_index=1)
    while True:
        out, err = attempt(pool.async_step_recv, env_index=1, timeout=0)
        if err is None:
            break
        assert isinstance(err, rlpool.Timeout), repr(err)
        assert err.env == 1
        time.sleep(0)
    assert item(out, "env_index") == 1


def test_batch_timeout_loses_nothing(make_pool):
    """A batch receive that times out before ``min_get`` is a ``Timeout``
    that takes nothing: a later receive gets every result."""
    step_us = 300_000
    timeout = 0.02
    pool = make_pool(["LatencyEnv"] * 3, create_env_kwargs=sleepers_kwargs([step_us, step_us, 0]))
    pool.reset()
    sent = time.monotonic()
    pool.async_step_send(actions([0, 0, 0]))
    called = time.monotonic()
    first, err = attempt(pool.async_step_recv, min_get=3, timeout=timeout)
    waited = time.monotonic() - called
    if err is not None:
        assert isinstance(err, rlpool.Timeout), repr(err)
        if time.monotonic() - sent < step_us / 1e6:
            assert (err.op, err.min_get) == ("step", 3)
            assert err.timeout == pytest.approx(timeout)
            assert err.ready <= 1, f"only env 2 can be ready: {err.ready}"
            assert waited >= timeout * 0.99
        assert envs_of(recv_all(pool, 3)) == [0, 1, 2], "nothing lost"
    else:
        assert envs_of(first) == [0, 1, 2]
    assert pool.in_flight() == []
