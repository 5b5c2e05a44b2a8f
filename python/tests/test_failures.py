"""Failures: an env that panics or returns an error in a step or a reset
(``EnvFailed`` with ``.env``, ``.name``, ``.worker``, ``.during``,
``.cause``; the other envs go on, nothing is lost), pools that cannot start
(``StartError``), and the pool after ``shutdown`` (``ShutDown``) or when it
is dropped. Ported from the Rust conformance suite, on every
configuration."""

from __future__ import annotations

import gc

import pytest
from helpers import (
    FAULTY,
    PATIENCE,
    action,
    actions,
    attempt,
    counts_of,
    envs_of,
    fault_message,
    faulty_kwargs,
    item,
    reaped,
    recv_all,
    sleepers_kwargs,
    wait_until,
)

import rlpool

pytestmark = pytest.mark.timeout(60)


def check_env_failed(err, config, env, during, message):
    """``err`` is an ``EnvFailed`` of env ``env`` during ``during`` whose
    cause carries ``message``, with the worker that ran it (``None`` with
    threads)."""
    assert isinstance(err, rlpool.EnvFailed), repr(err)
    assert err.env == env
    assert err.name == FAULTY
    assert err.during == during
    assert message in err.cause, err.cause
    assert err.worker == config.worker_of(env)
    text = str(err)
    assert f"env {env} ({FAULTY}" in text, text
    assert message in text, text


@pytest.mark.parametrize("fault", ["panic", "error"])
def test_env_failure_is_reported(make_pool, config, fault):
    """An env that fails mid-run: the error names it and carries its
    message; the other envs' results are not lost; the pool keeps working
    for every env, the failed one included. Env 2 fails in a batch receive
    (its third step), env 0 in a per-env one (its fifth)."""
    kwargs = [faulty_kwargs({0: 5, 2: 3}.get(env, 0), fault) for env in range(4)]
    pool = make_pool([FAULTY] * 4, create_env_kwargs=kwargs)
    pool.reset()
    counts = [0] * 4

    def check_all(batch):
        for env, count in zip(envs_of(batch), counts_of(batch)):
            counts[env] += 1
            assert count == counts[env], f"env {env}"

    for _ in range(2):
        check_all(pool.step(actions([1] * 4)))

    # Step 3: env 2 fails; the others' results all arrive.
    pool.async_step_send(actions([1] * 4))
    errors = []
    received = 0
    while received + len(errors) < 4:
        try:
            batch = pool.async_step_recv()
        except rlpool.EnvFailed as err:
            errors.append(err)
            continue
        assert 2 not in envs_of(batch)
        received += len(batch)
        check_all(batch)
    assert len(errors) == 1, errors
    check_env_failed(errors[0], config, 2, "step", fault_message(fault, 3))
    assert counts == [3, 3, 2, 3]
    assert pool.in_flight() == [], "the failed env is idle again"

    # Step 4: all four, the failed env included, work.
    check_all(pool.step(actions([1] * 4)))
    assert counts == [4, 4, 3, 4]

    # Step 5, per env: env 0 fails; the others are untouched by it.
    for env in range(4):
        pool.async_step_send(action(1), env_index=env)
    for env in reversed(range(4)):
        out, err = attempt(pool.async_step_recv, env_index=env, timeout=PATIENCE)
        if err is not None:
            assert env == 0, f"only env 0 fails: {err}"
            check_env_failed(err, config, 0, "step", fault_message(fault, 5))
        else:
            assert env != 0, "env 0 was to fail"
            counts[env] += 1
            assert item(out, ("next", "observation")) == counts[env]
    assert counts == [4, 5, 4, 5]

    check_all(pool.step(actions([1] * 4)))
    assert counts == [5, 6, 5, 6]
    pool.shutdown()
    with pytest.raises(rlpool.ShutDown):
        pool.step(actions([1] * 4))


def test_a_failed_reset_is_reported(make_pool, config):
    """An env whose second reset fails: a synchronous reset raises
    ``EnvFailed`` during ``"reset"``; the other envs' roots stay to be
    received; the env resets again afterwards. An async reset failure names
    the env too."""
    kwargs = [faulty_kwargs(2, "error_on_reset"), {}, faulty_kwargs(3, "error_on_reset")]
    pool = make_pool([FAULTY] * 3, create_env_kwargs=kwargs)
    pool.reset()
    pool.step(actions([1] * 3))
    with pytest.raises(rlpool.EnvFailed) as info:
        pool.reset()
    check_env_failed(info.value, config, 0, "reset", fault_message("error_on_reset", 2))
    assert pool.in_flight() == [1, 2], "the others' roots are kept"
    roots = recv_all(pool, 2, "reset")
    assert envs_of(roots) == [1, 2]
    assert counts_of(roots, "observation") == [0, 0]
    # Env 2's third reset fails, in an async reset.
    pool.async_reset_send()
    errors = []
    got = []
    while len(got) + len(errors) < 3:
        try:
            got += envs_of(pool.async_reset_recv())
        except rlpool.EnvFailed as err:
            errors.append(err)
    assert sorted(got) == [0, 1]
    (err,) = errors
    check_env_failed(err, config, 2, "reset", fault_message("error_on_reset", 3))
    assert counts_of(pool.reset(), "observation") == [0, 0, 0]


def test_failure_in_a_sync_step_loses_nothing(make_pool, config):
    """A synchronous step during which an env fails raises its error; the
    other envs' results stay to be received, and the pool goes on."""
    kwargs = [faulty_kwargs(0, "error"), faulty_kwargs(2, "error"), faulty_kwargs(0, "error")]
    pool = make_pool([FAULTY] * 3, create_env_kwargs=kwargs)
    pool.reset()
    pool.step(actions([1] * 3))
    with pytest.raises(rlpool.EnvFailed) as info:
        pool.step(actions([1] * 3))
    check_env_failed(info.value, config, 1, "step", fault_message("error", 2))
    assert pool.in_flight() == [0, 2], "the others' results are kept"
    rest = recv_all(pool, 2)
    assert envs_of(rest) == [0, 2]
    assert counts_of(rest) == [2, 2]
    assert counts_of(pool.step(actions([1] * 3))) == [3, 2, 3]


def test_pools_that_cannot_start(make_pool):
    """Pools that cannot be built: an unknown env name (the error lists the
    known ones), a constructor that panics, keyword arguments an env does
    not take or of the wrong type or range (``StartError`` naming the env
    and the key); no env or keyword sets of the wrong number
    (``InvalidArgument``); a keyword value of no env type, a maker that is
    neither a name nor a callable (``TypeError``); a callable that returns
    no env (``StartError``)."""
    with pytest.raises(rlpool.StartError) as info:
        make_pool(["CountingEnv", "Nope-v0"])
    for name in ("Nope-v0", "CartPole-v1", "CountingEnv", "LatencyEnv", "Pendulum-v1"):
        assert name in str(info.value), name
    with pytest.raises(rlpool.StartError, match="deliberate panic in a constructor"):
        make_pool(["CountingEnv", "PanicsWhenBuilt"])
    with pytest.raises(rlpool.StartError) as info:
        make_pool(["CountingEnv"] * 2, create_env_kwargs=[{}, {"max_step": 3}])
    for part in ("env 1", "max_step", "accepted"):
        assert part in str(info.value), part
    with pytest.raises(rlpool.StartError) as info:
        make_pool(["CountingEnv"], create_env_kwargs={"start_val": "ten"})
    for part in ("env 0", "start_val", "must be an int"):
        assert part in str(info.value), part
    with pytest.raises(rlpool.StartError) as info:
        make_pool(["CountingEnv"] * 3, create_env_kwargs=[{}, {}, {"max_steps": 2**63 - 1}])
    for part in ("env 2", "max_steps", "does not fit in i32"):
        assert part in str(info.value), part

    with pytest.raises(rlpool.InvalidArgument, match="at least one env"):
        make_pool([])
    with pytest.raises(rlpool.InvalidArgument, match="create_env_kwargs"):
        make_pool(["CountingEnv"] * 3, create_env_kwargs=[{}, {}])
    with pytest.raises(TypeError, match="start_val"):
        make_pool(["CountingEnv"], create_env_kwargs={"start_val": object()})
    with pytest.raises(rlpool.InvalidType, match=r"env_makers\[0\] is int"):
        make_pool([3])
    with pytest.raises(rlpool.StartError, match=r"must return a gymnasium\.Env"):
        make_pool([lambda: None])
    # The pool builds and runs afterwards.
    pool = make_pool(["CountingEnv"] * 2)
    assert counts_of(pool.step(actions([1, 1]))) == [1, 1]


def test_bad_pool_options(make_pool):
    """Options out of their sets are ``InvalidArgument``; zero threads or
    envs per worker mean the default."""
    for option in ({"backend": "fibers"}, {"stack": "tall"}, {"exchange": "pigeon"}):
        with pytest.raises(rlpool.InvalidArgument):
            make_pool(["CountingEnv"], **option)
    with pytest.raises(rlpool.InvalidArgument):
        make_pool(["CountingEnv"], envs_per_worker=-1)
    with pytest.raises(rlpool.InvalidArgument):
        make_pool(["CountingEnv"], start_timeout=-1.0)
    pool = make_pool(["CountingEnv"] * 2, envs_per_worker=0, num_threads=0)
    assert envs_of(pool.step(actions([1, 1]))) == [0, 1]


def test_calls_after_shutdown_are_shut_down(make_pool):
    """After ``shutdown`` (with results in flight) every call raises
    ``ShutDown``, also one whose arguments are bad as well; shutdown and
    close are idempotent."""
    pool = make_pool(["CountingEnv"] * 3)
    pool.reset()
    pool.async_step_send(actions([1, 1]), env_index=[0, 1])
    pool.shutdown()
    pool.shutdown()
    pool.close()
    assert pool.is_closed
    calls = [
        lambda: pool.reset(),
        lambda: pool.step(actions([1] * 3)),
        lambda: pool.step_and_maybe_reset(actions([1] * 3)),
        lambda: pool.async_reset_send(env_index=2),
        lambda: pool.async_step_send(action(1), env_index=2),
        lambda: pool.async_step_and_maybe_reset_send(actions([1]), env_index=[2]),
        lambda: pool.async_step_send(action(1), env_index=0),
        lambda: pool.async_step_recv(),
        lambda: pool.async_reset_recv(),
        lambda: pool.async_step_and_maybe_reset_recv(),
        lambda: pool.async_step_recv(min_get=2),
        lambda: pool.async_step_recv(timeout=0),
        lambda: pool.async_step_recv(env_index=0),
        lambda: pool.async_reset_recv(env_index=2),
        lambda: pool.async_step_and_maybe_reset_recv(env_index=2),
    ]
    for call in calls:
        with pytest.raises(rlpool.ShutDown, match="the pool is shut down"):
            call()


def test_the_with_block_shuts_the_pool_down(config):
    """Leaving a ``with`` block shuts the pool down, also on an
    exception."""
    with rlpool.AsyncEnvPool(["CountingEnv"] * 2, **config.options()) as pool:
        pool.step(actions([1, 1]))
    assert pool.is_closed
    other = rlpool.AsyncEnvPool(["CountingEnv"], **config.options())
    with pytest.raises(RuntimeError, match="inside"):
        fail_inside(other)
    assert other.is_closed
    with pytest.raises(rlpool.ShutDown):
        other.reset()


def fail_inside(pool):
    with pool:
        raise RuntimeError("inside")


def test_dropping_a_pool_with_results_in_flight(config):
    """Dropping a pool with results in flight (envs still stepping, or not
    received) shuts it down without anyone receiving them; its workers are
    reaped."""
    pool = rlpool.AsyncEnvPool(
        ["LatencyEnv"] * 4, create_env_kwargs=sleepers_kwargs([20_000] * 4), **config.options()
    )
    pids = pool.worker_pids
    pool.reset()
    pool.async_step_send(actions([0] * 4))
    del pool
    gc.collect()
    pool = rlpool.AsyncEnvPool(["CountingEnv"] * 4, **config.options())
    pids += pool.worker_pids
    pool.async_reset_send()
    del pool
    gc.collect()
    assert wait_until(lambda: all(reaped(pid) for pid in pids), 10.0), f"workers left: {pids}"
