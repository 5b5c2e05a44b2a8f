"""Fixtures of the suite: the backend configurations every conformance test
runs on (threads; processes with the queue; processes with shared memory),
pools that always shut down, shared idle pools of counters, and a check
that the suite leaves no child process, no ``/dev/shm`` entry and no open
memfd of rlpool behind."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import (
    CONFIGS,
    NEVER_DONE,
    PROC_CONFIGS,
    STARTS,
    Config,
    children,
    counting_kwargs,
    dev_shm,
    rlpool_memfds,
    wait_until,
)

import rlpool


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind() -> Iterator[None]:
    """After the whole suite: every worker process reaped, nothing added to
    ``/dev/shm`` (see also :func:`pytest_sessionfinish`)."""
    children_before = children()
    shm_before = dev_shm()
    yield
    gc.collect()
    wait_until(lambda: not (children() - children_before), patience=10.0)
    left = sorted(children() - children_before)
    shm_added = sorted(dev_shm() - shm_before)
    assert not left, f"child processes left after the suite: {left}"
    assert not shm_added, f"/dev/shm entries left after the suite: {shm_added}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Once every test and fixture is done and pytest holds no test's
    objects any more: no memfd of a pool may still be open in this process
    (a pool or result kept alive by the bindings). Fails the run if one
    is."""
    if session.config.option.collectonly:
        return
    gc.collect()
    memfds = rlpool_memfds()
    if memfds:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = f"FAILED: memfds of rlpool still open after the suite: {memfds}"
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(message, red=True)
        else:
            print(message)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(params=CONFIGS, ids=str)
def config(request: pytest.FixtureRequest) -> Config:
    """Each backend configuration: threading, multiprocessing with the
    queue, multiprocessing with shm."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=PROC_CONFIGS, ids=str)
def proc_config(request: pytest.FixtureRequest) -> Config:
    """The process configurations only (queue, shm)."""
    return request.param  # type: ignore[no-any-return]


PoolFactory = Callable[..., rlpool.AsyncEnvPool]


@pytest.fixture
def pools() -> Iterator[PoolFactory]:
    """Builds pools (``AsyncEnvPool``'s arguments) that are shut down when
    the test ends, whatever happens in it."""
    made: list[rlpool.AsyncEnvPool] = []

    def make(*args: Any, **kwargs: Any) -> rlpool.AsyncEnvPool:
        pool = rlpool.AsyncEnvPool(*args, **kwargs)
        made.append(pool)
        return pool

    try:
        yield make
    finally:
        for pool in made:
            pool.shutdown()


@pytest.fixture
def make_pool(config: Config, pools: PoolFactory) -> PoolFactory:
    """Builds pools on the test's configuration (overridable by keyword),
    shut down when the test ends."""

    def make(env_makers: Any, **kwargs: Any) -> rlpool.AsyncEnvPool:
        return pools(env_makers, **config.options(**kwargs))

    return make


class SharedPools:
    """Pools of four CountingEnvs (``STARTS``, never done) kept for the
    session, one per configuration and stack mode: most tests leave them
    idle, and building process pools for every test would cost seconds."""

    def __init__(self) -> None:
        self._pools: dict[tuple[str, str], rlpool.AsyncEnvPool] = {}

    def get(self, config: Config, stack: str) -> rlpool.AsyncEnvPool:
        key = (config.name, stack)
        pool = self._pools.get(key)
        if pool is None:
            pool = rlpool.AsyncEnvPool(
                ["CountingEnv"] * len(STARTS),
                create_env_kwargs=counting_kwargs(STARTS, NEVER_DONE),
                **config.options(stack=stack),
            )
            self._pools[key] = pool
        return pool

    def discard(self, config: Config, stack: str) -> None:
        pool = self._pools.pop((config.name, stack), None)
        if pool is not None:
            pool.shutdown()

    def close(self) -> None:
        for pool in self._pools.values():
            pool.shutdown()
        self._pools.clear()


@pytest.fixture(scope="session")
def shared_pools(nothing_left_behind: None) -> Iterator[SharedPools]:
    shared = SharedPools()
    try:
        yield shared
    finally:
        shared.close()


def _lend(shared: SharedPools, config: Config, stack: str) -> Iterator[rlpool.AsyncEnvPool]:
    pool = shared.get(config, stack)
    pool.reset()
    yield pool
    # A test that leaves envs in flight (a failure half-way) or shuts the
    # pool down gives it up: the next test gets a new one.
    if pool.is_closed or pool.in_flight():
        shared.discard(config, stack)


@pytest.fixture
def counters(shared_pools: SharedPools, config: Config) -> Iterator[rlpool.AsyncEnvPool]:
    """Four CountingEnvs starting at ``STARTS`` (never done), dense, just
    reset, nothing in flight; shared between tests."""
    yield from _lend(shared_pools, config, "dense")


@pytest.fixture(params=["dense", "maybe_dense", "lazy"])
def stacked_counters(
    request: pytest.FixtureRequest, shared_pools: SharedPools, config: Config
) -> Iterator[rlpool.AsyncEnvPool]:
    """:func:`counters` in each stack mode."""
    yield from _lend(shared_pools, config, request.param)
